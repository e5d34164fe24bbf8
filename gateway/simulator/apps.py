"""The apps registered on the simulator: credentials, bot identity and tenant tokens."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.simulator.config import SimConfig


class AppRegistry:
    """Every app the fake platform knows, by app_id; the first one is the primary app,
    the default wherever no app is named. Thread-safe: apps may be added while serving."""

    def __init__(self, primary: SimConfig) -> None:
        self._lock = threading.Lock()
        self.primary = primary
        self._apps: dict[str, SimConfig] = {primary.app_id: primary}

    def add(self, app_id: str, app_secret: str, *, bot_open_id: str | None = None,
            app_name: str | None = None) -> SimConfig:
        """Register an app; it shares the primary's ClientConfig and service id."""
        if not app_id or not app_secret:
            raise ValueError("an app needs a non-empty app_id and app_secret")
        suffix = app_id.removeprefix("cli_")
        app = dataclasses.replace(
            self.primary, app_id=app_id, app_secret=app_secret,
            bot_open_id=bot_open_id or f"ou_bot_{suffix}",
            app_name=app_name or f"Simulator Bot {suffix}")
        with self._lock:
            if app_id in self._apps:
                raise ValueError(f"app {app_id!r} is already registered")
            self._apps[app_id] = app
        return app

    def get(self, app_id: str | None) -> SimConfig:
        """The app with this id (None: the primary); KeyError when unknown."""
        if app_id is None:
            return self.primary
        with self._lock:
            app = self._apps.get(app_id)
        if app is None:
            raise KeyError(f"simulator: no app {app_id!r} registered (see add_app)")
        return app

    def find(self, app_id: object) -> SimConfig | None:
        """The app with this id, or None (for ids read from requests)."""
        if not isinstance(app_id, str):
            return None
        with self._lock:
            return self._apps.get(app_id)

    def by_token(self, token: str, generation: int) -> SimConfig | None:
        """The app a tenant token of this generation was issued to."""
        with self._lock:
            apps = list(self._apps.values())
        return next((a for a in apps if a.tenant_token(generation) == token), None)

    def recipients(self, app_id: str | None, chat_type: str,
                   mentions: Sequence[Mapping[str, Any]]) -> list[SimConfig]:
        """The apps a person's message goes to, as Feishu routes im.message.receive_v1: the
        app named (`app_id`); else, in a group, each app whose bot it @mentions, every one
        its own event under the same message id (a bot sees unmentioned group messages only
        with the permission to read them all, which the simulator models by naming the app);
        else the primary app."""
        if app_id is not None or chat_type != "group":
            return [self.get(app_id)]
        mentioned = {str((m.get("id") or {}).get("open_id", "")) for m in mentions}
        return [a for a in self.all() if a.bot_open_id in mentioned] or [self.primary]

    def all(self) -> list[SimConfig]:
        with self._lock:
            return list(self._apps.values())
