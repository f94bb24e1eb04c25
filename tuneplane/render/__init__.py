"""Render a JobSpec and LaunchPlan into manifests and scripts, parsed back and schema-checked. Pure."""
