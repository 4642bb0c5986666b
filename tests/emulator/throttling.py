"""ARM's subscription throttling: token buckets, 429 + Retry-After, the rate-limit headers.

One owner for the buckets and for the ledger of throttled-or-admitted ARM calls.

What Learn documents ("Understand how Azure Resource Manager throttles requests",
https://learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling,
section "Regional throttling and token bucket algorithm"):
  - a token bucket per operation type: subscription reads 250 tokens refilled at 25 per
    second, deletes 200 at 10/s, writes 200 at 10/s; a request takes one token, a full bucket
    discards refill tokens;
  - "Subscription limits apply per subscription, per service principal, and per operation
    type", plus "a global subscription limit that's equivalent to 15 times the individual
    service principal limit for each operation type" across all principals;
  - over the limit: HTTP 429 with a Retry-After value in seconds; the remaining requests in
    the x-ms-ratelimit-remaining-subscription-reads / -writes / -deletes headers (and the
    -global- variants for the subscription-wide bucket).
What it does not document, and what the emulator chooses (say so if you rely on it):
  - which operations are "writes": every method but GET/HEAD (reads) and DELETE (deletes),
    so POST actions such as listClusterUserCredential take a write token;
  - the Retry-After value: the whole seconds until the binding bucket holds a token again
    (at least 1);
  - the headers on a 429: the same remaining headers as any answer (0 for the empty bucket);
  - the 429 body: code SubscriptionRequestsThrottled with the message shape quoted by Learn's
    "Troubleshoot the TooManyRequestsReceived or SubscriptionRequestsThrottled error code"
    (https://learn.microsoft.com/troubleshoot/azure/azure-kubernetes/create-upgrade-delete/error-code-toomanyrequestsreceived-subscriptionrequeststhrottled);
  - tenant-level requests (no subscription in the path) are not throttled here, and the
    per-resource-provider limits are not modelled.

Settings (profiles.SETTINGS, changed through POST /_emulator/settings, back to these
defaults with the world on reset): arm_throttling ("on"/"off"), arm_<kind>_bucket,
arm_<kind>_refill for kind in reads/writes/deletes, arm_global_factor. On by default: the
documented figures allow 250 reads and 200 writes in a burst, far above what any single
test sends, so existing tests see the headers change and nothing else.
"""

import math
import time

from tests.emulator.httpbase import HttpError, Response
from tests.emulator import clock

KINDS = ("reads", "writes", "deletes")
# The documented figures: (bucket size, refill per second).
DOCUMENTED = {"reads": (250, 25.0), "writes": (200, 10.0), "deletes": (200, 10.0)}
GLOBAL_FACTOR = 15
LEDGER_MAX = 200_000  # calls remembered for GET /_emulator/throttling (oldest go first)
_VERB = {"reads": "read", "writes": "write", "deletes": "delete"}


def operation_kind(method):
    return {"GET": "reads", "HEAD": "reads", "DELETE": "deletes"}.get(method.upper(), "writes")


def new_world():
    """The throttling part of a fresh world (State.reset): full buckets, nothing counted."""
    return {"buckets": {}, "throttled": 0, "admitted": 0}


def reset(state):
    """Full buckets, nothing counted, an empty ledger (a reset world, DELETE /throttling)."""
    state.data["throttling"] = new_world()
    state.arm_calls = []


def _figures(settings, kind, shared=False):
    """(bucket size, refill per second) of a principal's bucket, or of the subscription-wide
    one (`shared`: arm_global_factor times both)."""
    factor = settings["arm_global_factor"] if shared else 1
    return settings[f"arm_{kind}_bucket"] * factor, settings[f"arm_{kind}_refill"] * factor


def _level(bucket, size, rate, now):
    """Tokens in a bucket now: what it held plus the refill since, never above its size
    (a smaller size set at runtime clamps at once)."""
    if bucket is None:
        return float(size)
    return min(float(size), bucket["tokens"] + max(0.0, now - bucket["at"]) * rate)


def _buckets(state, subscription, principal, kind):
    """[(key, size, rate)] of the buckets a call takes a token from: its principal's and
    the subscription's global one."""
    sub = subscription.lower()
    return [(f"{sub}|{(principal or '').lower()}|{kind}", *_figures(state.settings, kind)),
            (f"{sub}|*|{kind}", *_figures(state.settings, kind, shared=True))]


def _levels(state, buckets, now):
    world = state.data["throttling"]
    return [_level(world["buckets"].get(key), size, rate, now) for key, size, rate in buckets]


def _headers(kind, principal_left, global_left):
    return {f"x-ms-ratelimit-remaining-subscription-{kind}": str(max(0, int(principal_left))),
            f"x-ms-ratelimit-remaining-subscription-global-{kind}": str(max(0, int(global_left)))}


def admit(state, req, principal, subscription, now=None):
    """Take a token for this subscription-level call, or raise the 429 ARM answers.
    Sets `req.ratelimit` (the headers for the answer) and `req.throttle` (for the ledger).
    Call with the state lock held."""
    now = clock.now() if now is None else now
    kind = operation_kind(req.method)
    world = state.data["throttling"]
    req.throttle = {"kind": kind, "principal": principal, "subscription": subscription, "retry_after": None}
    buckets = _buckets(state, subscription, principal, kind)
    levels = _levels(state, buckets, now)
    if state.settings["arm_throttling"] == "off":
        req.ratelimit = _headers(kind, *levels)
        return
    short = [(key, size, rate, level) for (key, size, rate), level in zip(buckets, levels) if level < 1.0]
    if short:
        retry_after = max(_wait(1.0 - level, rate) for _, _, rate, level in short)
        world["throttled"] += 1
        state.mark_dirty()
        req.throttle["retry_after"] = retry_after
        req.ratelimit = _headers(kind, *levels)
        size = short[0][1]
        body = {"error": {
            "code": "SubscriptionRequestsThrottled",
            "message": f"Number of {_VERB[kind]} requests for subscription '{subscription}' actor "
                       f"'{principal}' exceeded the limit of '{size}' for time interval "
                       f"'{_interval(size, short[0][2])}'. Please try again after '{retry_after}' seconds."}}
        raise HttpError(Response.json(429, body, {"Retry-After": str(retry_after), **req.ratelimit}))
    for (key, _size, _rate), level in zip(buckets, levels):
        world["buckets"][key] = {"tokens": level - 1.0, "at": now}
    world["admitted"] += 1
    state.mark_dirty()
    req.ratelimit = _headers(kind, levels[0] - 1.0, levels[1] - 1.0)


def _wait(missing, rate):
    if rate <= 0:
        return 60  # a bucket that never refills: come back in a minute (settings may change)
    return max(1, math.ceil(missing / rate))


def _interval(size, rate):
    """The time a bucket takes to refill from empty, as hh:mm:ss (the message's 'time interval')."""
    seconds = int(math.ceil(size / rate)) if rate > 0 else 0
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def peek_headers(state, req, principal, subscription, now=None):
    """The remaining-requests headers without taking a token (answers refused before admission)."""
    now = clock.now() if now is None else now
    kind = operation_kind(req.method)
    return _headers(kind, *_levels(state, _buckets(state, subscription, principal, kind), now))


# -- the ledger: one entry per subscription-level ARM call that reached admission ----------


def record(state, req, status, started):
    """Remember an admitted or throttled call (kept in memory only: it can be large)."""
    info = getattr(req, "throttle", None)
    if info is None:
        return
    ledger = state.arm_calls
    ledger.append({"time": started, "method": req.method, "path": req.path, "kind": info["kind"],
                   "principal": info["principal"], "status": status, "retry_after": info["retry_after"],
                   "user_agent": req.header("User-Agent") or ""})
    if len(ledger) > LEDGER_MAX:
        del ledger[: len(ledger) - LEDGER_MAX]


def snapshot(state, since=0, now=None):
    """GET /_emulator/throttling: the figures, every bucket's level now, counts, the ledger."""
    now = clock.now() if now is None else now
    settings = state.settings
    world = state.data["throttling"]
    figures = {kind: dict(zip(("bucket", "refill_per_second"), _figures(settings, kind))) for kind in KINDS}
    levels = {}
    for key, bucket in world["buckets"].items():
        _sub, principal, kind = key.split("|")
        size, rate = _figures(settings, kind, shared=principal == "*")
        levels[key] = round(_level(bucket, size, rate, now), 3)
    return {"enabled": settings["arm_throttling"] == "on", "figures": figures,
            "global_factor": settings["arm_global_factor"], "buckets": levels,
            "throttled": world["throttled"], "admitted": world["admitted"],
            "calls": state.arm_calls[since:], "next": len(state.arm_calls)}
