"""The core's commands by group, each module filling its commands' parsers (registered by :mod:`critic.cli` as
``"critic.commands.GROUP:add_NAME"``, imported only when that command is used)."""
