"""Resolve a run into a JobSpec and compile it into a LaunchPlan: adapters, environment, shapes, images. Pure."""
