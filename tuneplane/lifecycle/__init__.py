"""Programs that run inside job images around a model's life: benchmark evaluation.

They run where only the standard library (and `tuneplane.report`) can be counted on, so modules here
import nothing else from the project and no third-party package at module level.
"""
