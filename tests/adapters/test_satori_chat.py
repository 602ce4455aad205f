"""Satori end to end: the fake server on loopback, the real engine and rules. What a user
of a platform behind the server writes reaches the rules, and the answer goes back through
the right account into the right channel."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.log_helpers import read_log
from tests.support.satori_fake import ALICE, BOB, DISCORD_BOT, GROUP, QQ_BOT, driven
from tmy.message import Outgoing, Target

RULES = r"""
rules:
  - id: ping
    triggers: [ping]
    mention: true
    steps:
      - {plugin: ADJUST, input: pong}
  - id: where
    triggers: ["where"]
    steps:
      - {plugin: ADJUST, input: "{PLATFORM}|{CHAT}|{USER}|{USER_NAME}"}
  - id: qq-only
    triggers: [hello]
    platforms: ["satori:qq"]
    steps:
      - {plugin: ADJUST, input: "hello from qq"}
  - id: discord-only
    triggers: [hello]
    platforms: ["satori:discord"]
    steps:
      - {plugin: ADJUST, input: "hello from discord"}
  - id: long
    triggers: [long]
    steps:
      - {plugin: ADJUST, input: "?= 'word ' * 900"}
  - id: markup
    triggers: [markup]
    steps:
      - {plugin: ADJUST, input: "a <b> & \"c\""}
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "Welcome {USER_NAME} ({EVENT_RAW}, by {EVENT_DATA[operator]})"}
  - id: quote
    triggers: ["what about this*"]
    steps:
      - plugin: ADJUST
        input: "?= REPLY_TO['user'] + ' said ' + REPLY_TO['text'] + ', ' + str(len(IMAGES))"
  - id: picture
    triggers: [cat]
    steps:
      - plugin: ADJUST
        input: {text: "a cat", image: "https://img.example/cat.png", mention: "502",
                reply: "in42"}
  - id: photo
    triggers: [photo]
    steps:
      - {plugin: ADJUST, input: {text: "", image: "https://img.example/cat.png"}}
  - id: gate
    events: [join_request]
    steps:
      - {plugin: ADJUST, input: "?= 'tea' in EVENT_DATA['comment']", save: APPROVE}
      - {plugin: ADJUST, input: "?= ''"}
  - id: friend
    events: [friend_request]
    steps:
      - {plugin: ADJUST, input: "?= True", save: APPROVE}
      - {plugin: ADJUST, input: "hi {USER}, {EVENT_DATA[comment]}"}
  - id: pressed
    events: [button]
    steps:
      - {plugin: ADJUST, input: "{USER} pressed {EVENT_DATA[data]}"}
  - id: poll
    triggers: [poll]
    steps:
      - plugin: ADJUST
        input: {text: "Lunch?", buttons: [[{text: Pizza, data: "lunch:pizza"}]]}
  - id: mute
    triggers: [mute all]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "muted {CHAT}"}
"""


async def test_a_group_mention_is_answered_in_its_channel_through_its_account() -> None:
    async with driven(RULES) as d:
        await d.fake.message("ping")  # no mention: a mention: true rule stays quiet
        await d.fake.nothing_sent()
        await d.fake.message(f'<at id="{QQ_BOT}" name="tmy"/> ping', message_id="in7")
        sent = await d.fake.next_sent()
    assert (sent["platform"], sent["user"]) == ("qq", QQ_BOT)
    assert sent["body"] == {"channel_id": GROUP, "content": '<quote id="in7"/>pong'}
    message = d.seen[-1]
    assert (message.text, message.mentions_bot, message.platform) == ("ping", True, "satori:qq")
    assert (message.self_id, message.message_id, message.chat) == (QQ_BOT, "in7", GROUP)


async def test_a_private_message_is_answered_in_the_private_channel_without_a_quote() -> None:
    async with driven(RULES) as d:
        await d.fake.message("where", channel="private:501", private=True)
        sent = await d.fake.next_sent()
    assert sent["body"] == {
        "channel_id": "private:501",
        "content": "satori:qq|private:501|501|Alice",
    }
    assert d.seen[-1].private is True


async def test_two_logins_are_told_apart_by_platform() -> None:
    async with driven(RULES) as d:
        await d.fake.message("hello", platform="discord", channel="c77")
        on_discord = await d.fake.next_sent()
        await d.fake.message("hello")
        on_qq = await d.fake.next_sent()
    assert (on_discord["platform"], on_discord["user"]) == ("discord", DISCORD_BOT)
    assert on_discord["body"]["content"].endswith("hello from discord")
    assert on_discord["body"]["channel_id"] == "c77"
    assert (on_qq["platform"], on_qq["user"]) == ("qq", QQ_BOT)
    assert on_qq["body"]["content"].endswith("hello from qq")


async def test_a_long_reply_is_split_in_order() -> None:
    async with driven(RULES) as d:
        await d.fake.message("long", message_id="in9")
        pieces = await d.fake.wait_calls("message.create", 3)
        await d.fake.nothing_sent()
    contents = [p["body"]["content"] for p in pieces]
    assert contents[0].startswith('<quote id="in9"/>')  # only the first quotes
    bodies = [c.removeprefix('<quote id="in9"/>') for c in contents]
    assert all(len(b) <= 2000 for b in bodies)
    assert " ".join(bodies).split() == ["word"] * 900


async def test_a_rate_limit_is_waited_out_and_the_message_sent_again(log_file: Path) -> None:
    async with driven(RULES) as d:
        d.fake.fail["message.create"] = [(429, {"Retry-After": "0.2"}, "slow down")]
        await d.fake.message("where")
        first = await d.fake.next_sent()
        again = await d.fake.next_sent()
    assert first["body"] == again["body"]
    (limited,) = [e for e in read_log(log_file) if e["event"] == "satori.rate_limited"]
    assert limited["retry_in"] == 0.2  # the server's Retry-After, not a backoff guess
    assert "HTTP 429: slow down" in limited["error"]


async def test_text_is_escaped_and_elements_become_plain_text() -> None:
    async with driven(RULES) as d:
        await d.fake.message("markup")
        sent = await d.fake.next_sent()
        await d.fake.message(
            '<b>where</b> is\n\nit <at id="502" name="bob"/> <sharp id="7" name="general"/> '
            '<a href="https://x.example">site</a> &lt;tag&gt;'
        )
        async with asyncio.timeout(10):
            while len(d.seen) < 2:
                await asyncio.sleep(0.01)
    assert sent["body"]["content"].endswith('a &lt;b&gt; &amp; "c"')
    assert d.seen[-1].text == "where is\n\nit @bob #general site (https://x.example) <tag>"


async def test_a_member_join_reaches_its_event_rule() -> None:
    async with driven(RULES) as d:
        await d.fake.emit(
            "guild-member-added", guild={"id": GROUP}, user=BOB, member={"nick": "Bobby"},
            operator={"id": "501"},
        )  # fmt: skip
        sent = await d.fake.next_sent()
    assert sent["body"] == {
        "channel_id": GROUP,
        "content": "Welcome Bobby (guild-member-added, by 501)",
    }
    event = d.seen[-1].event
    assert event is not None and event.kind == "member_join"
    assert event.data["guild"] == GROUP and event.data["user"] == "502"


async def test_elements_in_quote_and_image_out_quote_at_and_img() -> None:
    async with driven(RULES) as d:
        earlier = await d.fake.message("where", message_id="in1")  # the bot answers it
        answer = await d.fake.next_sent()
        assert earlier["message"]["id"] == "in1"
        await d.fake.message(
            '<quote id="out1"><author id="10001"/>the answer</quote>what about this '
            '<img src="https://img.example/a.png" title="a.png"/>'
        )
        said = await d.fake.next_sent()
        await d.fake.message("cat")
        cat = await d.fake.next_sent()
    assert answer["body"]["content"].startswith('<quote id="in1"/>')
    message = d.seen[-2]
    assert message.reply_to == "out1" and message.mentions_bot  # replying to the bot
    assert message.text == "what about this [image]"
    (picture,) = message.attachments
    assert (picture.kind, picture.url, picture.mime) == ("image", "https://img.example/a.png",
                                                         "image/png")  # fmt: skip
    assert said["body"]["content"].endswith(f"{QQ_BOT} said the answer, 1")
    assert cat["body"]["content"] == (
        '<quote id="in42"/><at id="502"/> a cat<img src="https://img.example/cat.png"/>'
    )


async def test_a_join_request_is_approved_by_the_rule() -> None:
    async with driven(RULES) as d:
        await d.fake.emit(
            "guild-member-request", guild={"id": GROUP}, user=BOB,
            message={"id": "req-1", "content": "I like tea"},
        )  # fmt: skip
        (approved,) = await d.fake.wait_calls("guild.member.approve")
        await d.fake.emit(
            "guild-member-request", guild={"id": GROUP}, user=ALICE,
            message={"id": "req-2", "content": "coffee"},
        )  # fmt: skip
        declined = (await d.fake.wait_calls("guild.member.approve", 2))[1]
        await d.fake.nothing_sent()
    assert approved["body"] == {"message_id": "req-1", "approve": True}
    assert declined["body"] == {"message_id": "req-2", "approve": False}
    assert approved["platform"] == "qq" and approved["user"] == QQ_BOT


async def test_buttons_go_out_and_a_press_reaches_the_button_rule() -> None:
    async with driven(RULES) as d:
        await d.fake.message("poll", platform="discord", channel="c1")
        on_discord = await d.fake.next_sent()
        await d.fake.message("poll")
        on_qq = await d.fake.next_sent()  # QQ's official API needs markdown rights for buttons
        await d.fake.emit("interaction/button", platform="discord", button={"id": "lunch:pizza"},
                          user=BOB, channel={"id": "c1", "type": 0})  # fmt: skip
        pressed = await d.fake.next_sent()
    assert on_discord["body"]["content"].endswith(
        'Lunch?<button type="action" id="lunch:pizza">Pizza</button>'
    )
    assert on_qq["body"]["content"].endswith("Lunch?\n[Pizza]")
    assert pressed["body"] == {"channel_id": "c1", "content": "502 pressed lunch:pizza"}


async def test_chat_admins_come_from_the_member_roles() -> None:
    async with driven(RULES, admins_from=("owner", "admin")) as d:
        d.fake.members[(GROUP, "502")] = {"user": BOB, "roles": [{"id": "admin", "name": "admin"}]}
        await d.fake.message("mute all", user=ALICE)  # no role: the rule refuses
        await d.fake.nothing_sent()
        await d.fake.message("mute all", user=BOB)
        sent = await d.fake.next_sent()
        await d.fake.message("mute all", user=ALICE, member={"roles": ["owner"]})  # carried
        carried = await d.fake.next_sent()
    assert sent["body"]["content"].endswith(f"muted {GROUP}")
    assert carried["body"]["content"].endswith(f"muted {GROUP}")
    asked = [c["body"] for c in d.fake.calls_of("guild.member.get")]
    assert asked == [{"guild_id": GROUP, "user_id": "501"}, {"guild_id": GROUP, "user_id": "502"}]


async def test_send_posts_through_the_first_account_of_the_platform() -> None:
    async with driven(RULES) as d:
        await d.adapter.send(Target("satori:discord", "c5"), "from cron")
        sent = await d.fake.next_sent()
        await d.adapter.send(Target("satori:qq", "", user="501"), "to a user")
        direct = await d.fake.next_sent()
    assert (sent["platform"], sent["body"]) == ("discord", {"channel_id": "c5",
                                                            "content": "from cron"})  # fmt: skip
    assert direct["body"] == {"channel_id": "private:501", "content": "to a user"}
    assert d.fake.calls_of("user.channel.create")[0]["body"] == {"user_id": "501"}


async def test_a_friend_request_is_approved_and_greeted_in_a_private_channel() -> None:
    async with driven(RULES) as d:
        await d.fake.emit("friend-request", user=BOB, message={"id": "f1", "content": "add me"})
        (approved,) = await d.fake.wait_calls("friend.approve")
        greeting = await d.fake.next_sent()
    assert approved["body"] == {"message_id": "f1", "approve": True}
    assert d.fake.calls_of("user.channel.create")[0]["body"] == {"user_id": "502"}
    assert greeting["body"] == {"channel_id": "private:502", "content": "hi 502, add me"}
    assert d.seen[-1].chat == "private:502" and d.seen[-1].private


async def test_a_picture_without_text_goes_out_from_a_rule_and_from_send() -> None:
    """An image-only reply (and ``send``) raised IndexError in compose: nothing went out."""
    async with driven(RULES) as d:
        await d.fake.message("photo", message_id="in5")
        answered = await d.fake.next_sent()
        await d.adapter.send(Target("satori:qq", GROUP), "", Outgoing(images=["https://i.x/a.png"]))
        posted = await d.fake.next_sent()
    assert answered["body"]["content"] == (
        '<quote id="in5"/><img src="https://img.example/cat.png"/>'
    )
    assert posted["body"] == {"channel_id": GROUP, "content": '<img src="https://i.x/a.png"/>'}
