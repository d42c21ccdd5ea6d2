"""CLI commands: explain (registered by attnkit.cli.build_parser)."""

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this group's commands; filled in as the group is built."""
