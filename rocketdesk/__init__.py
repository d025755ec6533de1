"""The RocketDesk application: the ``rocketdesk`` command line, benchmarks, the demo store and
the console's load processes. It sits on top: it uses cluster/, export/ and gui/, and none of
them imports it (import-linter checks that)."""
