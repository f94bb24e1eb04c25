"""What people read: dashboard pages, SVG charts and their axes and legends, terminal columns, a run's
metrics by canonical name. Pure over status data; imported by the commands and the bot."""
