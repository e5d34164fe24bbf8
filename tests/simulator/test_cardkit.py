"""CardKit card entities on the simulator, over real HTTP: create, stream text, settings,
full update, send once; the views a test reads them through."""

from __future__ import annotations

import json
from typing import Any

from gateway.simulator import Simulator
from tests.support.openapi import CARDS, MESSAGES, Api, streaming_card


def card_ref(card_id: str) -> dict[str, Any]:
    return {"type": "card", "data": {"card_id": card_id}}


def test_a_streaming_card_grows_then_closes_and_is_sent_once(simulator: Simulator) -> None:
    question = simulator.send_text("oc_card", "explain", deliver=False)
    with Api(simulator) as api:
        created = api.create_card(streaming_card())
        assert created.status_code == 200 and created.json()["code"] == 0
        card_id = created.json()["data"]["card_id"]
        reply = api.reply(question, "interactive", card_ref(card_id), uuid="stream-1")
        assert reply.json()["code"] == 0
        mid = reply.json()["data"]["message_id"]
        again = api.reply(question, "interactive", card_ref(card_id), uuid="stream-1")
        assert again.json()["data"]["message_id"] == mid  # a retry, not a second send
        for n, text in enumerate(["The", "The answer", "The answer is 42"], start=1):
            assert api.stream(card_id, "answer", text, n, uuid=f"u-{n}").json()["code"] == 0
        assert api.stream(card_id, "answer", "The answer is 42", 3,
                          uuid="u-3").json()["code"] == 0  # same uuid: idempotent
        assert api.stream(card_id, "answer", "late", 3).json()["code"] == 300317
        assert api.stream(card_id, "answer", "other", 9, uuid="u-1").json()["code"] == 200770
        view = simulator.wait_for_card(mid, text="The answer is 42", streaming=True)
        assert (view.card_id, view.updates, view.sequence, view.message_id) == (
            card_id, 3, 3, mid)
        assert view.history == ("…", "The", "The answer", "The answer is 42")
        assert view.rejected == 2
        [sent] = simulator.sent_messages("oc_card")
        assert (sent.card_id, sent.text, sent.streaming, sent.card_updates) == (
            card_id, "The answer is 42", True, 3)

        settings = json.dumps({"config": {"streaming_mode": False}})
        assert api.code("PATCH", f"{CARDS}/{card_id}/settings",
                        {"settings": settings, "sequence": 4}) == 0
        assert api.stream(card_id, "answer", "more", 5).json()["code"] == 300309
        final = streaming_card("The answer is 42.")
        final["config"] = {"update_multi": True}
        final["body"]["elements"].append({"tag": "markdown", "content": "done"})
        assert api.code("PUT", f"{CARDS}/{card_id}", {
            "card": {"type": "card_json", "data": json.dumps(final)}, "sequence": 6}) == 0
        closed = simulator.wait_for_card(mid, streaming=False, text="The answer is 42.\ndone")
        assert simulator.card_updates(card_id) == closed.updates == 5
        assert closed.elements == {"answer": "The answer is 42."}
        assert api.reply(question, "interactive", card_ref(card_id)).json()["code"] == 230099
        assert len(simulator.sent_messages("oc_card")) == 1
        items = api.call("GET", f"{MESSAGES}/{mid}").json()["data"]["items"]
        assert json.loads(items[0]["body"]["content"]) == closed.card


def test_card_entities_are_validated_and_guarded(simulator: Simulator) -> None:
    simulator.add_app("cli_other", "other-secret")
    with Api(simulator) as api, Api(simulator, "cli_other", "other-secret") as other:
        def create_code(data: str) -> int:
            return api.code("POST", CARDS, {"type": "card_json", "data": data})

        assert create_code("{not json") == 200220
        assert create_code(json.dumps({"schema": "1.0", "elements": []})) == 300303
        assert create_code("") == 300307
        big = streaming_card("x" * (31 * 1024))
        assert create_code(json.dumps(big)) == 200860
        twice = streaming_card()
        twice["body"]["elements"].append({"tag": "markdown", "content": "b",
                                          "element_id": "answer"})
        assert create_code(json.dumps(twice)) == 300301
        card_id = api.create_card(streaming_card()).json()["data"]["card_id"]
        assert api.stream("7000000000000000001", "answer", "x", 1).json()["code"] == 200740
        assert api.stream(card_id, "nope", "x", 1).json()["code"] == 300313
        assert other.stream(card_id, "answer", "x", 1).json()["code"] == 300311
        assert other.send("oc_x", "interactive", card_ref(card_id)).json()["code"] == 230099
        assert api.send("oc_x", "interactive", card_ref("7000000000000000001")
                        ).json()["code"] == 230099
        assert api.stream(card_id, "answer", "ok", 1).json()["code"] == 0
        simulator.expire_card_streaming(card_id)  # Feishu closes it after 10 minutes
        assert api.stream(card_id, "answer", "ok again", 2).json()["code"] == 200850
        view = simulator.card(card_id)
        assert view is not None and not view.streaming_mode and view.text == "ok"
        assert [c.card_id for c in simulator.cards()] == [card_id]
        assert simulator.card_of("om_unknown") is None
