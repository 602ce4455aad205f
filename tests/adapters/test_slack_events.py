"""What Slack's events become for the rules, payload by payload (no network)."""

from __future__ import annotations

from tests.support.slack_fake import ANN, BOB, BOT_USER, CHANNEL, DM, TEAM
from tmy.adapters.slack.events import buttons_of, event_of, recall_of
from tmy.adapters.slack.incoming import Me, to_message

ME = Me(BOT_USER, "B0BOT0001", TEAM, "Tmy Test")


def test_leaves_reactions_and_deletions_are_events() -> None:
    left = event_of({"type": "member_left_channel", "user": BOB, "channel": CHANNEL}, "Ev1", ME)
    assert left is not None and left.key == "Ev1" and left.message.event is not None
    assert (left.message.event.kind, left.message.event.data) == (
        "member_leave",
        {"user": BOB, "chat": CHANNEL, "operator": "", "kicked": False},
    )
    item = {"type": "message", "channel": CHANNEL, "ts": "1.000001"}
    gone = event_of({"type": "reaction_removed", "user": ANN, "reaction": "tada", "item": item},
                    "Ev2", ME)  # fmt: skip
    assert gone is not None and gone.message.event is not None
    assert gone.message.event.data["added"] is False and gone.message.event.data["emoji"] == "tada"
    before = {"user": ANN, "ts": "1.000001"}
    deleted = {"type": "message", "subtype": "message_deleted", "channel": CHANNEL,
               "deleted_ts": "1.000001", "previous_message": before}  # fmt: skip
    recall = recall_of(deleted, ME)
    assert recall is not None and recall.message.event is not None
    assert (recall.message.event.kind, recall.message.event.raw) == ("message_recall",
                                                                     "message_deleted")  # fmt: skip
    assert recall.message.event.data["message_id"] == "1.000001"
    assert event_of({"type": "member_joined_channel", "user": BOT_USER, "channel": CHANNEL},
                    "Ev3", ME) is None  # the bot's own join  # fmt: skip
    assert event_of({"type": "channel_rename", "channel": {"id": CHANNEL}}, "Ev4", ME) is None


def test_messages_files_and_buttons() -> None:
    file = {"id": "F1", "name": "a.pdf", "mimetype": "application/pdf", "size": 3,
            "url_private": "https://files.slack.com/a.pdf"}  # fmt: skip
    files = [file, {"mode": "tombstone"}]
    shared = {"type": "message", "subtype": "file_share", "channel": DM, "user": ANN, "text": "",
              "ts": "2.000001", "channel_type": "im", "files": files}  # fmt: skip
    incoming = to_message(shared, ME, set())
    assert incoming is not None and incoming.message.text == "[file]"
    assert incoming.message.private and incoming.key == f"{DM}:2.000001"
    (attachment,) = incoming.message.attachments
    assert (attachment.kind, attachment.inline, attachment.name) == ("file", True, "a.pdf")
    joined = {"type": "message", "subtype": "channel_join", "channel": CHANNEL, "user": ANN,
              "text": "<@U0ANN0001> has joined the channel", "ts": "3.000001"}  # fmt: skip
    assert to_message(joined, ME, set()) is None
    press = {"type": "block_actions", "user": {"id": BOB}, "channel": {"id": CHANNEL},
             "container": {"message_ts": "4.000001"}, "message": {"ts": "4.000001"},
             "actions": [{"type": "button", "value": "yes", "action_ts": "5.1"},
                         {"type": "static_select", "action_ts": "5.2"}]}  # fmt: skip
    (button,) = buttons_of(press, ME)
    assert button.message.event is not None and button.thread is None
    assert button.message.event.data == {"user": BOB, "chat": CHANNEL, "data": "yes",
                                         "message_id": "4.000001"}  # fmt: skip
