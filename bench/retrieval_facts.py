"""What the retrieval benchmark's documents say: names, facts, and questions about them.

Each kind of document (English and Chinese product FAQs, community rules, company
policies) has a maker of its facts: for one named entity, each fact's sentence with its
value, three questions asking for it — one sharing a word with the sentence, one sharing
only a word's stem or a character, one sharing nothing but the name — and a decoy: a
sentence on the same subject, without the value, that the document puts in another
paragraph. :func:`entity` names things from word lists whose parts are shared (brands,
places, trades), so a name's rarest word, not the whole name, tells documents apart.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


def words(text: str, sep: str = " ") -> list[str]:
    """A word list written as one string (shorter than a list literal)."""
    return text.split(sep)


BRANDS = words(
    "Veltrix Quorava Zanex Lumara Torion Brisith Casora Norelle Oriflux Paxima "
    "Helvane Kestro Myrion Solvent Tavrin Ulmora"
)
GADGETS = words(
    "router, air purifier, e-reader, smart speaker, robot vacuum, headset, tablet, "
    "smartwatch, projector, dashcam, kettle, thermostat",
    ", ",
)
PLACES = words(
    "Riverside, Oakwood, Harbour, Northgate, Elm Park, Lakeview, Old Town, "
    "Hillcrest, Westbrook, Maple Row, Stonebridge, Fairfield, Kingsmoor, Ashford, "
    "Brookvale, Cedar Hill, Dunmore, Glenwood, Highbury, Ivydale",
    ", ",
)
HOBBIES = words(
    "Chess Cycling Photography Book Birdwatching Hiking Baking Astronomy Gardening "
    "Film Running Knitting Pottery Jazz Go"
)
GROUPS = words("Club Society Circle Guild Collective League")
FIRMS = words(
    "Harbourline Brightwater Ironleaf Silverpine Redcliff Bluestone Goldcrest "
    "Greenhollow Northwind Eastmere Southgate Westfield"
)
TRADES = words(
    "Logistics Insurance Software Foods Pharmacy Travel Printing Energy Textiles "
    "Media Robotics Furniture"
)
CITIES = words(
    "Lisbon Bristol Osaka Denver Tallinn Porto Leeds Hamburg Valencia Krakow "
    "Adelaide Quebec Bergen Turin Cork Ghent"
)
PEOPLE = words(
    "Ada Morgan, Ben Okafor, Clara Duval, Dev Patel, Elena Russo, Felix Brandt, "
    "Grace Liu, Hugo Silva, Iris Novak, Jonas Berg, Kira Tanaka, Leo Marsh",
    ", ",
)
STREETS = words("Willow Granite Orchard Mill Station Abbey Quarry Canal")
BANNED = words(
    "referral links, crypto giveaways, unsourced rumours, spoilers without tags, "
    "political slogans, private phone numbers, pirated files, chain letters",
    ", ",
)
FIRM_ENDS = words("Ltd Group Co Inc Partners Holdings Works Labs")
DAYS = words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
ZH_BRANDS = words("星澜 云岚 青禾 墨川 朗宁 锦澄 沐光 拓野 悦声 极昼 澄心 远航 知夏 若溪 启明 霁月")
ZH_GADGETS = words(
    "空气净化器 路由器 电子书阅读器 智能音箱 扫地机器人 蓝牙耳机 "
    "平板电脑 智能手表 投影仪 行车记录仪 电热水壶 温控器"
)
ZH_PLACES = words(
    "青松 翠湖 南山 东篱 白石 梧桐 临江 北塘 西岭 清河 "
    "长乐 丰泽 望京 桃源 明月 金沙 银杏 春晖 秋水 星火"
)
ZH_HOBBIES = words("读书 围棋 摄影 骑行 徒步 烘焙 天文 园艺 观影 跑步 编织 陶艺 爵士 书法 象棋")
ZH_GROUPS = words("会 社 俱乐部 协会 小组 联盟")
ZH_FIRMS = words("海棠 恒远 铁叶 银松 赤崖 蓝石 金冠 青谷 北风 东湖 南门 西田")
ZH_TRADES = words("物流 保险 软件 食品 医药 旅行社 印务 能源 纺织 传媒 机器人 家具")
ZH_CITIES = words("成都 杭州 西安 苏州 厦门 青岛 昆明 大连 长沙 南京 武汉 宁波 合肥 贵阳 兰州 福州")
ZH_PEOPLE = words("王晓明 李雪梅 张国栋 刘思远 陈静怡 杨帆 赵子龙 黄婷婷 周立新 吴佳琪 徐海涛 孙悦")
ZH_ROADS = words("人民路 解放路 中山路 建设路 文化路 和平街 长江路 友谊路")
ZH_BANNED = words(
    "广告链接 拉票信息 未经证实的谣言 剧透内容 他人电话号码 盗版资源 抽奖转发 赌博网站"
)
ZH_FIRM_ENDS = words("有限公司 集团 股份公司 控股 科技公司 实业")
ZH_WEEKDAYS = words("一 二 三 四 五 六 日")


@dataclass(frozen=True, slots=True)
class Fact:
    kind: str
    sentence: str  # as the document states it
    value: str  # the answer: a chunk holding it (from this document) answers the question
    asks: tuple[str, ...]  # questions asking for it: sharing a word, a word's stem, or none
    decoy: str  # a sentence on the same subject without the value, in another paragraph


def _en_product(r: random.Random, e: str) -> list[Fact]:
    n = r.randrange
    hotline = f"+1-555-01{n(10, 99)}-{n(1000, 9999)}"
    return [
        Fact("warranty", f"Each {e} comes with a warranty of {{v}} against manufacturing defects.",
             f"{n(12, 49)} months", (f"How long is the warranty on the {e}?",
                                     f"For how long is the {e} guaranteed?",
                                     f"If my {e} breaks, until when is the repair free?"),
             f"Keep the box of your {e}: the warranty desk may ask for its serial number."),
        Fact("battery", f"On a full charge the battery of the {e} keeps going for roughly {{v}}.",
             f"{n(4, 40)} hours", (f"How long does the {e} battery last?",
                                   f"How many hours does the {e} run when charged?",
                                   f"How long can I use the {e} unplugged?"),
             f"Charge the {e} with the cable in the box; other chargers may harm the battery."),
        Fact("weight", f"Without its stand the {e} weighs {{v}}.", f"{n(150, 4000)} grams",
             (f"What does the {e} weigh?", f"What is the weight of the {e}?",
              f"How heavy is the {e}?"),
             f"The stand of the {e} adds a little weight but keeps it steady."),
        Fact("hotline", f"Our helpline for owners of the {e} is {{v}}, staffed on weekdays.",
             hotline, (f"What is the helpline number for the {e}?",
                       f"Which phone line helps owners of the {e}?",
                       f"Who do I call when my {e} needs support?"),
             f"Owners of the {e} can also find answers in the online help centre."),
        Fact("price", f"The recommended retail price of the {e} is {{v}}.",
             f"${n(29, 900)}.{n(10, 99)}", (f"What is the retail price of the {e}?",
                                            f"How is the {e} priced?",
                                            f"How much does a {e} cost?"),
             f"Retail partners may sell the {e} at a price of their own choosing."),
        Fact("factory", f"Units of the {e} are assembled at our plant in {{v}}.",
             r.choice(CITIES), (f"In which plant is the {e} assembled?",
                                f"Where does assembly of the {e} happen?",
                                f"Where is the {e} made?"),
             f"Every unit of the {e} is tested twice before it leaves the plant."),
        Fact("returns", f"Unopened {e} units may be returned within {{v}} of delivery for a "
             "full refund.", f"{n(7, 61)} days",
             (f"Can I get a refund on the {e}, and until when?",
              f"What is the deadline for returns of the {e}?",
              f"How long do I have to send back an unwanted {e}?"),
             f"A refund for the {e} goes back to the card used for the order."),
    ]  # fmt: skip


def _en_community(r: random.Random, e: str) -> list[Fact]:
    n = r.randrange
    return [
        Fact("meeting", f"Members of the {e} meet every {{v}}.",
             f"{r.choice(DAYS)} at {n(5, 10)}:{r.choice(['00', '15', '30', '45'])} pm",
             (f"When do members of the {e} meet?", f"When is the {e}'s meeting?",
              f"On which evening does the {e} get together?"),
             f"Members of the {e} who miss a meeting can read the notes online."),
        Fact("dues", f"Annual dues for the {e} come to {{v}} per person.", f"${n(10, 400)}",
             (f"What are the annual dues of the {e}?",
              f"How much must each person pay per year to join the {e}?",
              f"What is the yearly fee to join the {e}?"),
             f"Dues of the {e} pay for the room, the tea and the library."),
        Fact("founder", f"The {e} was founded in the spring by {{v}}.", r.choice(PEOPLE),
             (f"Who founded the {e}?", f"Who is the founder of the {e}?", f"Who started the {e}?"),
             f"The {e} has kept the friendly spirit it was founded with."),
        Fact("venue", f"Sessions of the {e} take place at {{v}}.",
             f"{n(2, 300)} {r.choice(STREETS)} Street",
             (f"Where do sessions of the {e} take place?",
              f"What is the address of the {e}'s sessions?", f"Where does the {e} gather?"),
             f"Sessions of the {e} start on time, so please arrive early."),
        Fact("ban", f"In the {e} chat, posting {{v}} leads to an immediate ban.",
             r.choice(BANNED), (f"What gets you banned in the {e} chat?",
                                f"Which posts lead to a ban in the {e}?",
                                f"What kind of message gets you kicked out of the {e} right away?"),
             f"The {e} chat is for friendly talk; a moderator may mute off-topic posts."),
        Fact("size", f"The {e} accepts no more than {{v}} at any time.", f"{n(20, 500)} members",
             (f"How many members can the {e} accept?",
              f"What is the membership limit of the {e}?", f"How big can the {e} get?"),
             f"New members of the {e} are welcomed at the start of each season."),
    ]  # fmt: skip


def _en_policy(r: random.Random, e: str) -> list[Fact]:
    n = r.randrange
    mail = f"complaints-{n(100, 999)}@{e.split()[0].lower()}.example"
    return [
        Fact("leave", f"Employees of {e} receive {{v}} of paid leave per year.",
             f"{n(15, 36)} days",
             (f"How much paid leave do {e} employees get?",
              f"How many days off a year are {e} employees entitled to?",
              f"How many holidays a year do {e} workers get?"),
             f"Employees of {e} ask their manager before taking leave."),
        Fact("hq", f"{e} has its headquarters in {{v}}.", r.choice(CITIES),
             (f"Where are the headquarters of {e}?", f"In which city is {e} headquartered?",
              f"Where is {e}'s head office?"),
             f"Visitors to the headquarters of {e} sign in at the front desk."),
        Fact("shipping", f"Orders placed with {e} are shipped within {{v}} of payment.",
             f"{n(6, 96)} hours", (f"How soon are orders from {e} shipped?",
                                   f"What is the shipping time at {e}?",
                                   f"How quickly does {e} dispatch a parcel once I have paid?"),
             f"Orders from {e} are packed in recycled boxes."),
        Fact("retention", f"{e} deletes customer records after {{v}}.", f"{n(2, 11)} years",
             (f"When does {e} delete customer records?",
              f"How long until {e} deletes my customer data?",
              f"For how many years is my personal data kept by {e}?"),
             f"Customer records at {e} are encrypted and backed up nightly."),
        Fact("complaints", f"Complaints about {e} should be emailed to {{v}}.", mail,
             (f"Where do I send complaints about {e}?",
              f"Which email address handles complaints about {e}?",
              f"Where can I send a grievance about {e}?"),
             f"Complaints about {e} are answered in the order they arrive."),
        Fact("remote", f"Staff at {e} may work from home up to {{v}} each week.",
             f"{n(1, 5)} working days", (f"How many days can {e} staff work from home?",
                                         f"How often can {e} staff work remotely?",
                                         f"How many remote days per week are allowed at {e}?"),
             f"Staff at {e} who work from home keep their calendar up to date."),
    ]  # fmt: skip


def _zh_product(r: random.Random, e: str) -> list[Fact]:
    n = r.randrange
    return [
        Fact("warranty", f"{e}自购买之日起享受{{v}}的免费保修服务。", f"{n(12, 49)}个月",
             (f"{e}的保修期是多久？", f"{e}免费维修多长时间？", f"{e}的质保期有多长？"),
             f"申请{e}保修时请提供机身上的序列号。"),
        Fact("battery", f"{e}充满电后大约可以连续使用{{v}}。", f"{n(4, 40)}小时",
             (f"{e}充满电能连续使用多久？", f"{e}充一次电能用多长时间？", f"{e}的续航能坚持多久？"),
             f"请使用{e}原装的充电线，其他充电器可能损伤电池。"),
        Fact("weight", f"不含底座时{e}的机身重量为{{v}}。", f"{n(150, 4000)}克",
             (f"{e}的机身重量是多少？", f"{e}有多重？", f"{e}拿在手里大概几斤几两？"),
             f"{e}的底座会增加一些重量，但能让机身更稳。"),
        Fact("hotline", f"{e}的售后热线是{{v}}，工作日有人接听。",
             f"400-{n(100, 999)}-{n(1000, 9999)}",
             (f"{e}的售后热线是多少？", f"{e}售后电话多少？", f"{e}出了问题该打哪个号码？"),
             f"{e}的用户也可以在线上帮助中心找到售后答案。"),
        Fact("price", f"{e}的建议零售价为{{v}}。", f"{n(99, 6000)}元",
             (f"{e}的零售价是多少？", f"{e}卖什么价？", f"买一台{e}要花多少钱？"),
             f"各零售渠道可以自行决定{e}的售价。"),
        Fact("factory", f"{e}由我们位于{{v}}的工厂组装生产。", r.choice(ZH_CITIES),
             (f"{e}在哪个工厂生产？", f"{e}是在哪里组装的？", f"{e}的产地是哪个城市？"),
             f"每一台{e}出厂前都要经过两次检测。"),
        Fact("returns", f"未拆封的{e}可在签收后{{v}}内申请退货退款。", f"{n(7, 61)}天",
             (f"{e}签收后多久内可以退货？", f"{e}的退款期限是几天？",
              f"不想要{e}了，最晚什么时候还能送回去？"),
             f"{e}的退款会原路退回下单时使用的银行卡。"),
    ]  # fmt: skip


def _zh_community(r: random.Random, e: str) -> list[Fact]:
    n = r.randrange
    return [
        Fact("meeting", f"{e}的成员每{{v}}聚会一次。",
             f"周{r.choice(ZH_WEEKDAYS)}晚上{n(6, 10)}点{r.choice(['整', '半'])}",
             (f"{e}的成员什么时候聚会？", f"{e}每周哪天聚？", f"{e}一般什么时候碰头？"),
             f"错过聚会的{e}成员可以在网上查看会议记录。"),
        Fact("dues", f"{e}每年的会费是每人{{v}}。", f"{n(10, 400)}元",
             (f"{e}的会费是多少？", f"{e}每人每年交多少钱？", f"加入{e}一年要花多少？"),
             f"{e}的会费用于场地、茶水和图书。"),
        Fact("founder", f"{e}由{{v}}在某年春天发起创办。", r.choice(ZH_PEOPLE),
             (f"{e}是谁创办的？", f"{e}的创始人是谁？", f"{e}是谁建立的？"),
             f"{e}一直保持着创办时友好的氛围。"),
        Fact("venue", f"{e}的活动在{{v}}举行。", f"{r.choice(ZH_ROADS)}{n(2, 300)}号",
             (f"{e}的活动在哪里举行？", f"{e}活动的地址在哪？", f"{e}在什么地方碰面？"),
             f"{e}的活动准时开始，请提前到场。"),
        Fact("ban", f"在{e}的群里发布{{v}}会被立即移出群聊。", r.choice(ZH_BANNED),
             (f"在{e}群里发布什么会被移出群聊？", f"{e}的群聊禁止发哪些消息？",
              f"在{e}群里发什么内容会直接被踢？"),
             f"{e}的群聊用于友好交流，管理员可能会禁言跑题的发言。"),
        Fact("size", f"{e}最多接纳{{v}}。", f"{n(20, 500)}名成员",
             (f"{e}最多接纳多少人？", f"{e}的人数上限是多少？", f"{e}能容纳多少人？"),
             f"{e}在每个季度开始时欢迎新成员加入。"),
    ]  # fmt: skip


def _zh_policy(r: random.Random, e: str) -> list[Fact]:
    n = r.randrange
    return [
        Fact("leave", f"{e}的员工每年享有{{v}}带薪年假。", f"{n(5, 21)}天",
             (f"{e}员工的带薪年假有几天？", f"{e}的员工一年能休几天假？",
              f"在{e}上班一年有多少天假期？"),
             f"{e}的员工休年假前需要提前告知主管。"),
        Fact("hq", f"{e}的总部设在{{v}}。", r.choice(ZH_CITIES),
             (f"{e}的总部设在哪里？", f"{e}总公司位于哪个城市？", f"{e}的大本营在哪？"),
             f"来访{e}总部的客人请在前台登记。"),
        Fact("shipping", f"{e}在确认付款后{{v}}内发货。", f"{n(6, 96)}小时",
             (f"{e}付款后多久发货？", f"{e}下单后多长时间寄出？",
              f"在{e}买东西，包裹多久能送出去？"),
             f"{e}的订单使用环保纸箱包装发货。"),
        Fact("retention", f"{e}会在{{v}}后删除客户资料。", f"{n(2, 11)}年",
             (f"{e}什么时候删除客户资料？", f"{e}会把客户信息保存多久？",
              f"{e}的用户数据保留几年？"),
             f"{e}的客户资料经过加密，并且每晚备份。"),
        Fact("complaints", f"对{e}的投诉请发送邮件至{{v}}。",
             f"tousu{n(100, 999)}@kefu{n(10, 99)}.example",
             (f"投诉{e}的邮件发到哪里？", f"对{e}不满意应该写信给哪个邮箱？",
              f"想对{e}提意见该联系谁？"),
             f"对{e}的投诉会按收到的先后顺序处理。"),
        Fact("remote", f"{e}允许员工每周最多居家办公{{v}}。", f"{n(1, 5)}个工作日",
             (f"{e}每周最多可以居家办公几天？", f"{e}一周可以在家上班几天？",
              f"{e}的远程工作政策是怎样的？"),
             f"在家办公的{e}员工需要及时更新日程。"),
    ]  # fmt: skip


Maker = Callable[[random.Random, str], list[Fact]]
KINDS: dict[tuple[str, str], tuple[str, Maker]] = {  # (lang, kind): (title, facts)
    ("en", "product"): ("{e} — frequently asked questions", _en_product),
    ("en", "community"): ("{e} — community rules", _en_community),
    ("en", "policy"): ("{e} — company policies", _en_policy),
    ("zh", "product"): ("{e} 常见问题", _zh_product),
    ("zh", "community"): ("{e} 群规", _zh_community),
    ("zh", "policy"): ("{e} 公司制度", _zh_policy),
}
# Shared sentences: subject × verb × object × when (4,096 per language), in every kind of
# document, with words the questions use too ("questions", "members", "orders", "客户").


def entity(r: random.Random, lang: str, kind: str) -> str:
    if lang == "en":
        if kind == "product":
            model = f"{chr(65 + r.randrange(26))}{r.randrange(2, 100)}"
            return f"{r.choice(BRANDS)} {model} {r.choice(GADGETS)}"
        if kind == "community":
            return f"{r.choice(PLACES)} {r.choice(HOBBIES)} {r.choice(GROUPS)}"
        return f"{r.choice(FIRMS)} {r.choice(TRADES)} {r.choice(FIRM_ENDS)}"
    if kind == "product":
        model = f"{chr(65 + r.randrange(26))}{r.randrange(2, 100)}"
        return f"{r.choice(ZH_BRANDS)}{model}{r.choice(ZH_GADGETS)}"
    if kind == "community":
        return f"{r.choice(ZH_PLACES)}{r.choice(ZH_HOBBIES)}{r.choice(ZH_GROUPS)}"
    return f"{r.choice(ZH_FIRMS)}{r.choice(ZH_TRADES)}{r.choice(ZH_FIRM_ENDS)}"
