"""The record of runs in git: status files, charts and pages written in one batch, the ledger, and
publishing the commits to the shared branch; shared by `tp submit --local`/`--push`, `tp job cancel`
and the bot."""
