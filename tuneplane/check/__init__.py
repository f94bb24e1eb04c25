"""Validate: rules, params, plugin checks and reporters. Pure over the lab's files."""
