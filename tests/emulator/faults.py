"""Fault injection: rules that make matching requests fail, stall, vanish or arrive corrupted.

A rule (POST /_emulator/faults takes a list):
    {"match": {"method": "PUT", "path_regex": "roleAssignments", "query_regex": "...",
               "server": "arm|entra|himds|apiserver|artifacts|any", "times": 2},
     "respond": {"status": 429, "headers": {"Retry-After": "1"}, "body": {...}}}
  or, instead of "respond": "drop": true (close the connection without answering),
  "corrupt": true (answer normally but with a damaged body), "truncate": N (answer normally,
  announce the whole Content-Length, send only the first N bytes of the body, then close the
  connection: a transfer cut short), or only "delay": seconds (answer normally, late), or
  only "hold": true (answer normally once the test lets it go: DELETE /_emulator/faults or a
  reset releases every held request; a gate for "the run is inside this request now", where a
  delay would be a time the test races). "delay" and "hold" combine with the others.
  "set": {"properties.currentKubernetesVersion": "1.30.4/x"} answers normally with those
  fields of the JSON body replaced (a dotted path; a segment of digits indexes a list;
  missing objects are created): a hostile or broken service's value in an otherwise
  well-formed answer.
`times` (default: unlimited) counts matches; a rule is removed once used up. Rules are
tried in order; the first match wins. The admin API itself is never faulted.
"""

import json
import re

from tests.emulator.httpbase import Response

SERVERS = ("any", "arm", "entra", "himds", "apiserver", "artifacts")
_MATCH_KEYS = {"method", "path_regex", "query_regex", "server", "times"}
_RULE_KEYS = {"match", "respond", "delay", "hold", "drop", "corrupt", "truncate", "set"}


class FaultError(ValueError):
    pass


def _check_regex(where, value, problems):
    if not isinstance(value, str):
        problems.append(f"{where} = {value!r}: expected a regular expression string")
        return
    try:
        re.compile(value)
    except re.error as e:
        problems.append(f"{where} = {value!r}: expected a valid regular expression ({e})")


def validate(rules):
    """Check a list of rules; raises FaultError naming every problem (index, field, value)."""
    if isinstance(rules, dict):
        rules = [rules]
    if not isinstance(rules, list):
        raise FaultError(f"faults: expected a JSON list of rules, got {type(rules).__name__}")
    problems = []
    for i, rule in enumerate(rules):
        at = f"faults[{i}]"
        if not isinstance(rule, dict):
            problems.append(f"{at} = {rule!r}: expected an object")
            continue
        for key in set(rule) - _RULE_KEYS:
            problems.append(f"{at}.{key}: unknown key; expected one of {', '.join(sorted(_RULE_KEYS))}")
        match = rule.get("match", {})
        if not isinstance(match, dict):
            problems.append(f"{at}.match = {match!r}: expected an object")
            match = {}
        for key in set(match) - _MATCH_KEYS:
            problems.append(f"{at}.match.{key}: unknown key; expected one of {', '.join(sorted(_MATCH_KEYS))}")
        if "method" in match and not (isinstance(match["method"], str) and match["method"].isalpha()):
            problems.append(f"{at}.match.method = {match['method']!r}: expected an HTTP method such as \"PUT\"")
        for key in ("path_regex", "query_regex"):
            if key in match:
                _check_regex(f"{at}.match.{key}", match[key], problems)
        if "server" in match and match["server"] not in SERVERS:
            problems.append(f"{at}.match.server = {match['server']!r}: expected one of {', '.join(SERVERS)}")
        if "times" in match and not (isinstance(match["times"], int) and not isinstance(match["times"], bool)
                                     and match["times"] > 0):
            problems.append(f"{at}.match.times = {match['times']!r}: expected a positive integer")
        actions = [k for k in ("respond", "drop", "corrupt", "set") if rule.get(k) not in (None, False)]
        if "truncate" in rule:  # 0 bytes is a truncation too (headers only)
            actions.append("truncate")
        if len(actions) > 1:
            problems.append(f"{at}: {' and '.join(actions)} exclude each other; give one")
        if not actions and "delay" not in rule and not rule.get("hold"):
            problems.append(f"{at}: nothing to do; expected one of respond, drop, corrupt, truncate, set, delay, hold")
        if "delay" in rule and not (isinstance(rule["delay"], (int, float)) and not isinstance(rule["delay"], bool)
                                    and 0 <= rule["delay"] <= 300):
            problems.append(f"{at}.delay = {rule['delay']!r}: expected seconds between 0 and 300")
        if "truncate" in rule and not (isinstance(rule["truncate"], int) and not isinstance(rule["truncate"], bool)
                                       and rule["truncate"] >= 0):
            problems.append(f"{at}.truncate = {rule['truncate']!r}: expected a number of bytes (0 or more) to send")
        if "set" in rule and not (isinstance(rule["set"], dict) and rule["set"]
                                  and all(isinstance(k, str) and k and "" not in k.split(".") for k in rule["set"])):
            problems.append(f"{at}.set = {rule['set']!r}: expected an object of dotted.field.path: new value")
        for key in ("drop", "corrupt", "hold"):
            if key in rule and not isinstance(rule[key], bool):
                problems.append(f"{at}.{key} = {rule[key]!r}: expected true or false")
        if "respond" in rule:
            resp = rule["respond"]
            if not isinstance(resp, dict):
                problems.append(f"{at}.respond = {resp!r}: expected an object")
            else:
                status = resp.get("status")
                if not (isinstance(status, int) and 100 <= status <= 599):
                    problems.append(f"{at}.respond.status = {status!r}: expected an HTTP status code 100-599")
                headers = resp.get("headers", {})
                if not (isinstance(headers, dict) and all(isinstance(v, (str, int, float)) for v in headers.values())):
                    problems.append(f"{at}.respond.headers = {headers!r}: expected an object of header: value")
    if problems:
        raise FaultError("; ".join(problems))
    return [dict(rule, hits=0) for rule in rules]


def take(rules, request):
    """The first rule matching `request`, with its use counted (and removed when used up).
    Call with the state lock held; `rules` is the state's list."""
    for i, rule in enumerate(rules):
        match = rule.get("match", {})
        server = match.get("server", "any")
        if server != "any" and server != request.kind:
            continue
        if "method" in match and match["method"].upper() != request.method:
            continue
        if "path_regex" in match and not re.search(match["path_regex"], request.path, re.IGNORECASE):
            continue
        if "query_regex" in match and not re.search(match["query_regex"], request.query_string, re.IGNORECASE):
            continue
        rule["hits"] += 1
        if "times" in match:
            match["times"] -= 1
            if match["times"] <= 0:
                del rules[i]
        return rule
    return None


def canned_response(respond):
    """The Response a `respond` action describes. A JSON body is sent as JSON, a string as text."""
    headers = {k: str(v) for k, v in respond.get("headers", {}).items()}
    body = respond.get("body")
    if body is None:
        return Response.empty(respond["status"], headers)
    if isinstance(body, str):
        return Response(respond["status"], body, headers, "text/plain; charset=utf-8")
    return Response(respond["status"], json.dumps(body), headers, "application/json; charset=utf-8")


def corrupt(body):
    """Damage a body the way a broken mirror or proxy would: same length, different bytes."""
    if not body:
        return b"\x00"
    damaged = bytearray(body)
    for i in range(0, len(damaged), max(1, len(damaged) // 16)):
        damaged[i] ^= 0xFF
    return bytes(damaged)


def set_fields(body, fields):
    """The JSON `body` with each dotted path in `fields` set to its value; the body as it was
    when it is not JSON (the rule then changes nothing: what the test sees says so)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    for path, value in fields.items():
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            else:
                return body
        if isinstance(node, list) and last.isdigit() and int(last) < len(node):
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            return body
    return json.dumps(doc).encode()
