"""Commands that write a person's files: init/new scaffolding, migrate, recipe upgrade, plugin authoring."""
