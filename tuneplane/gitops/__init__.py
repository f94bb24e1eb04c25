"""The run lifecycle in git: submit, rerun, cancel, the bot, observe, writeback, charts."""
