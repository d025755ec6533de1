"""The console's logic and wording without Qt: what views show, computed by plain functions and
objects that tests run without a display."""
