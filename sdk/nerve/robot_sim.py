"""nerve.robot_sim — a simulated robot on the far end of a nerve.serial link.

    nerve robot-sim --listen tcp://127.0.0.1:7000 --log robot.jsonl
    nerve robot-sim --listen /dev/ttyUSB1             # or any pyserial URL

It keeps a pose (x, y in meters, heading in degrees counter-clockwise from +x, so "left" is
+), a speed, gripper, lights and arm states, applies each command the link delivers, and
appends one JSON line per command to the log::

    {"seq": 17, "time": 1718000000.123, "command": {...}, "result": "applied",
     "pose": {"x": 0.0, "y": 2.0, "heading": 90.0}, "state": {...}}

Commands (JSON objects; docs/SERIAL.md has the schema). Keys other than the ones read are
ignored (and logged with the command):

    {"action": "turn", "direction": "left"|"right"|"around", "degrees": 90}   (rotate: same)
    {"action": "move", "direction": "forward"|"back"|"backward"|"left"|"right",
     "meters": 2 | "centimeters": 50 | "seconds": 3}       (go, drive: same; no distance: keeps
                                                            moving until stop, pose unchanged)
    {"action": "stop"}                          (halt: same) ends any motion
    {"action": "pause"} / {"action": "resume"}  paused: moves and turns are refused
    {"action": "speed", "value": 0..100} or {"action": "speed", "change": "faster"|"slower"}
    {"action": "gripper", "state": "open"|"close"|"closed"}   (grab / release: same)
    {"action": "lights", "state": "on"|"off"}
    {"action": "arm", "state": "up"|"down"}     (lift / lower: same)
    {"action": "home"}                          back to (0, 0), heading 0
    {"action": "status"}                        the ack's result carries the whole state

A command the robot cannot carry out (unknown action, missing or bad argument, paused) is
still acknowledged — it was delivered — with ``{"rejected": reason}`` as the ack's result
(``Ack.ok`` is False), and logged with ``"result": "rejected"`` and the reason; the state does
not change. A retried command is applied once (the link drops duplicates).

``--listen tcp://HOST:PORT`` (``socket://HOST:PORT`` means the same here) listens for TCP
connections, since pyserial's socket:// only connects; each connection is a link of its own
(one at a time is typical; several are served side by side against the one robot). Port 0
picks a free port. Any other URL is opened with pyserial and served until interrupted. The
first line on stdout says where it listens (``nerve robot-sim: listening on socket://...``).
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, TextIO, Union

__all__ = ["RobotSim", "serve", "CommandRejected"]

_MAX_SPEED_MPS = 1.0  # speed 100 = 1 m/s: what a "seconds" move covers
_MAX_DISTANCE_M = 1000.0
_MAX_DEGREES = 3600.0

_ACTIONS = {"rotate": "turn", "go": "move", "drive": "move", "halt": "stop", "lift": "arm", "lower": "arm",
            "grab": "gripper", "release": "gripper", "dock": "home", "yes": "reply", "no": "reply",
            "cancel": "reply", "repeat": "reply", "digits": "reply"}
_MOVE_DIRECTIONS = {"forward": (1, 0), "ahead": (1, 0), "front": (1, 0), "back": (-1, 0), "backward": (-1, 0),
                    "backwards": (-1, 0), "reverse": (-1, 0), "left": (0, 1), "right": (0, -1)}


class CommandRejected(Exception):
    """A command the robot cannot carry out; the message is the reason sent back."""


def _number(command: Dict[str, Any], key: str, low: float, high: float) -> float:
    value = command.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandRejected(f"'{key}' must be a number, not {value!r}")
    if not (math.isfinite(value) and low <= value <= high):
        raise CommandRejected(f"'{key}' = {value} is outside [{low:g}, {high:g}]")
    return float(value)


def _word(command: Dict[str, Any], key: str) -> str:
    value = command.get(key)
    if not isinstance(value, str):
        raise CommandRejected(f"'{key}' must be a word, not {value!r}")
    return value.strip().lower()


class RobotSim:
    """The robot's state and the commands that change it. ``apply(command, seq)`` returns the
    ack's result ({} applied, {"rejected": reason} refused, {"state": ...} for status) and
    appends the log line. Thread-safe: applies one command at a time."""

    def __init__(self, log: Optional[Union[str, Path, TextIO]] = None, clock: Callable[[], float] = time.time):
        self.x = 0.0
        self.y = 0.0
        self.heading = 0.0
        self.speed = 50.0
        self.gripper = "closed"
        self.lights = "off"
        self.arm = "down"
        self.camera = "off"
        self.camera_aim = "center"
        self.moving: Optional[str] = None
        self.paused = False
        self.applied = 0
        self.rejected = 0
        self._clock = clock
        self._lock = threading.Lock()
        self._own_log = isinstance(log, (str, Path))
        self._log: Optional[TextIO] = open(log, "a", encoding="utf-8") if self._own_log else log

    @property
    def pose(self) -> Dict[str, float]:
        return {"x": round(self.x, 6), "y": round(self.y, 6), "heading": round(self.heading, 6)}

    @property
    def state(self) -> Dict[str, Any]:
        return {**self.pose, "speed": self.speed, "gripper": self.gripper, "lights": self.lights, "arm": self.arm,
                "camera": self.camera, "moving": self.moving, "paused": self.paused}

    def apply(self, command: Dict[str, Any], seq: Optional[int] = None) -> Dict[str, Any]:
        with self._lock:
            try:
                result = self._apply(command)
                self.applied += 1
                entry = {"seq": seq, "time": round(self._clock(), 6), "command": command, "result": "applied"}
            except CommandRejected as exc:
                self.rejected += 1
                result = {"rejected": str(exc)}
                entry = {"seq": seq, "time": round(self._clock(), 6), "command": command, "result": "rejected",
                         "reason": str(exc)}
            entry["pose"] = self.pose
            entry["state"] = self.state
            if self._log is not None:
                self._log.write(json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n")
                self._log.flush()  # a killed simulator keeps every line it acknowledged
            return result

    # the link's handler signature
    __call__ = apply

    def close(self) -> None:
        if self._own_log and self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "RobotSim":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _apply(self, command: Dict[str, Any]) -> Dict[str, Any]:
        raw = command.get("action")
        if not isinstance(raw, str):
            raise CommandRejected("the command has no 'action'")
        action = _ACTIONS.get(raw.strip().lower(), raw.strip().lower())
        handler = getattr(self, "_do_" + action, None)
        if handler is None:
            raise CommandRejected(f"unknown action {raw!r}")
        if self.paused and action in ("turn", "move"):
            raise CommandRejected(f"paused: '{raw}' refused until resume")
        return handler(command, raw.strip().lower()) or {}

    def _do_turn(self, command, raw):
        direction = _word(command, "direction") if "direction" in command else "left"
        degrees = _number(command, "degrees", 0, _MAX_DEGREES) if "degrees" in command else 90.0
        if direction == "around":
            degrees, direction = (180.0 if "degrees" not in command else degrees), "left"
        if direction not in ("left", "right"):
            raise CommandRejected(f"a turn goes left, right or around, not {direction!r}")
        self.heading = (self.heading + (degrees if direction == "left" else -degrees)) % 360.0

    def _do_move(self, command, raw):
        direction = _word(command, "direction") if "direction" in command else "forward"
        if direction not in _MOVE_DIRECTIONS:
            raise CommandRejected(f"a move goes {', '.join(sorted(_MOVE_DIRECTIONS))}, not {direction!r}")
        if "meters" in command:
            distance = _number(command, "meters", 0, _MAX_DISTANCE_M)
        elif "centimeters" in command:
            distance = _number(command, "centimeters", 0, _MAX_DISTANCE_M * 100) / 100.0
        elif "seconds" in command:
            distance = _number(command, "seconds", 0, 3600) * self.speed / 100.0 * _MAX_SPEED_MPS
        else:
            self.moving = direction  # open-ended: until stop
            return None
        along, side = _MOVE_DIRECTIONS[direction]
        h = math.radians(self.heading)
        self.x += distance * (along * math.cos(h) - side * math.sin(h))
        self.y += distance * (along * math.sin(h) + side * math.cos(h))
        self.moving = None

    def _do_stop(self, command, raw):
        self.moving = None

    def _do_pause(self, command, raw):
        self.moving = None
        self.paused = True

    def _do_resume(self, command, raw):
        self.paused = False

    def _do_speed(self, command, raw):
        if "value" in command:
            self.speed = _number(command, "value", 0, 100)
        elif "change" in command:
            change = _word(command, "change")  # the default grammar says up/down
            if change not in ("faster", "slower", "up", "down"):
                raise CommandRejected(f"a speed change is faster/up or slower/down, not {change!r}")
            up = change in ("faster", "up")
            self.speed = min(100.0, self.speed + 10) if up else max(0.0, self.speed - 10)
        else:
            raise CommandRejected("a speed command needs 'value' (0-100) or 'change' (faster, slower)")

    def _do_gripper(self, command, raw):
        if raw in ("grab", "release") and "state" not in command:
            self.gripper = "closed" if raw == "grab" else "open"
            return
        state = _word(command, "state")
        if state not in ("open", "close", "closed"):
            raise CommandRejected(f"the gripper is open or closed, not {state!r}")
        self.gripper = "open" if state == "open" else "closed"

    def _do_lights(self, command, raw):
        state = _word(command, "state")
        if state not in ("on", "off"):
            raise CommandRejected(f"the lights are on or off, not {state!r}")
        self.lights = state

    def _do_arm(self, command, raw):
        if raw in ("lift", "lower") and "state" not in command:
            self.arm = "up" if raw == "lift" else "down"
            return
        state = _word(command, "state" if "state" in command else "direction")  # grammar: direction
        if state not in ("up", "down", "lift", "lower", "raise"):
            raise CommandRejected(f"the arm goes up or down, not {state!r}")
        self.arm = "up" if state in ("up", "lift", "raise") else "down"

    def _do_home(self, command, raw):
        self.x = self.y = self.heading = 0.0
        self.moving = None

    def _do_status(self, command, raw):
        return {"state": self.state}

    def _do_battery(self, command, raw):
        return {"battery": 1.0}  # a simulator's battery never drains

    def _do_camera(self, command, raw):
        if "aim" in command:  # up, down, left, right, center
            aim = _word(command, "aim")
            if aim not in ("up", "down", "left", "right", "center", "front", "rear"):
                raise CommandRejected(f"the camera aims up, down, left, right or center, not {aim!r}")
            self.camera_aim = aim
            return
        state = _word(command, "state")
        if state not in ("on", "off"):
            raise CommandRejected(f"the camera is on or off, not {state!r}")
        self.camera = state

    def _do_follow(self, command, raw):
        self.moving = "follow"  # until stop

    def _do_reply(self, command, raw):
        """yes / no / cancel / repeat / a digit string: answers to the robot's questions; the
        simulator asks none, so they are acknowledged and logged, nothing moves."""
        return None


def serve(url: str, log: Optional[Union[str, Path]] = None, baudrate: int = 115200, once: bool = False,
          stop: Optional[threading.Event] = None, out: TextIO = sys.stdout, sim: Optional[RobotSim] = None) -> int:
    """Runs a RobotSim behind a LinkServer on url until interrupted (or, with once, until the
    first connection ends; or until stop is set). Prints where it listens, then one line per
    connection. Returns the exit status."""
    from .serial import LinkServer, TcpListener, parse_listen_url

    own_sim = sim is None
    sim = sim if sim is not None else RobotSim(log)
    stop = stop or threading.Event()
    try:
        where = parse_listen_url(url)
        if where is None:
            server = LinkServer(url, sim.apply, baudrate=baudrate)
            print(f"nerve robot-sim: serving on {server.url}", file=out, flush=True)
            server.start()
            try:
                while not stop.wait(0.2):
                    if server.ended:
                        break
            finally:
                server.close()
            print(f"nerve robot-sim: {server.url}: {server.ended or 'closed'}", file=out, flush=True)
            return 0
        with TcpListener(*where) as listener:
            print(f"nerve robot-sim: listening on {listener.url}", file=out, flush=True)
            servers = []
            while not stop.is_set():
                port = listener.accept(timeout=0.2)
                if port is None:
                    continue
                server = LinkServer(port, sim.apply)
                print(f"nerve robot-sim: link from {port.name}", file=out, flush=True)
                if once:
                    reason = server.serve()
                    server.close()
                    print(f"nerve robot-sim: {port.name}: {reason}", file=out, flush=True)
                    break
                servers = [s for s in servers if s.ended is None] + [server.start()]
            for server in servers:
                server.close()
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        if own_sim:
            sim.close()
