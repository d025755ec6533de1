"""What every layer shares and none owns: the root of RocketDesk's errors. A leaf: it imports
nothing of ours, so the store (itself a leaf otherwise) and the protocol code can use it."""
