"""The web console: the daemon's fourth front end (after the CLI, chat and the HTTP
admin API), served under ``console.path`` on the one web listener for the people
who run the bot — rules, a playground that explains, variables, schedules, live
runs, memory, chats and health, behind a password."""
