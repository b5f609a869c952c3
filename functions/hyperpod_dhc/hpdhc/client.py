"""The operator API client: SigV4-signed HTTPS calls with the standard AWS credential chain.

One method per API route, named like the route's handler in the Api function (`list_clusters`, `list_groups`,
`list_nodes`, `get_node`, `request_checks`, `get_breakers`, `reset_breaker`, and the Slurm bridge's `slurm_state`,
`report_occupancy`); each returns the route's JSON as is, a paginated or chunked route's pages merged into one.
`get_nodes` is `get_node` for many nodes, a few at a time. The endpoint is the stack's `ApiEndpoint` output unless
one is given.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# boto3 and botocore ship no type information (and boto3-stubs is no dependency): to mypy they are untyped.
import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials

ENDPOINT_OUTPUT = "ApiEndpoint"
DEFAULT_STACK = "HyperPodDhc"
SLURM_STATE_PAGE = 10_000  # nodes per page of the desired Slurm state: the most the route gives
SLURM_PAGE = 1000  # nodes per occupancy report
NODE_WORKERS = 8  # `get_nodes`: requests in flight at once (API Gateway's default throttle is far above)
LOCAL_HOSTS = ("127.0.0.1", "localhost")  # the twin's local API (`hpdhc simulate --serve`) checks no signature
# Answers worth another try: throttled (API Gateway's 429), the Api function throttled by AWS (503 "retry"), a
# failed or timed-out function (502, 504), an error of API Gateway (500). Every route may be sent twice: the reads
# change nothing, and a repeated write finds its work done (a node already queued is not queued again, a reset
# breaker resets nothing, an occupancy report says the same).
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_BASE_S = 0.5  # the first retry waits up to this, each next one up to twice as long (full jitter)
RETRY_MAX_WAIT_S = 8.0  # the longest one wait, Retry-After included
# NodeState (hyperpod_dhc.deephealth.domain.nodes), the `state` the nodes route filters on: the CLI's own copy (it runs
# on Python 3.10 without pydantic), held to the domain's by tests/unit/test_slurm_contract.py.
NODE_STATES = (
    "pending",
    "checking",
    "passed",
    "recovery_due",
    "recovering",
    "failed",
    "quarantined",
    "inconclusive",
    "gone",
    "shadowed",
)

Json = dict[str, Any]


def add_api_options(parser: argparse.ArgumentParser) -> None:
    """The options that say which API to call and as whom, the same for every command that calls it."""
    parser.add_argument("--endpoint", help="API URL (default: the stack's ApiEndpoint output)")
    parser.add_argument("--stack", default=DEFAULT_STACK, help="stack to read the endpoint from")
    parser.add_argument("--profile")
    parser.add_argument("--region")


class ApiError(RuntimeError):
    """An answer other than 2xx (`status` is its HTTP status), or 0 when no request could be made."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class _Retry(Exception):
    """One try that may be tried again: the error it would be, and how long the server asked to wait (if it did)."""

    def __init__(self, error: ApiError, retry_after_s: float | None = None) -> None:
        super().__init__(str(error))
        self.error, self.retry_after_s = error, retry_after_s


class OperatorClient:
    def __init__(
        self,
        endpoint: str | None = None,
        profile: str | None = None,
        region: str | None = None,
        stack: str = DEFAULT_STACK,
        retries: int = 0,
    ) -> None:
        """`retries`: how many times a throttled or failed request (`RETRIED_STATUSES`, or no connection) is sent
        again, with jittered exponential back-off. The operator commands retry; the Slurm bridge and the gate have
        loops and deadlines of their own and leave it at 0."""
        self.retries = retries
        self.sleep = time.sleep  # how a back-off waits (tests wait for nothing)
        # An endpoint names its region (`https://abc.execute-api.eu-west-1.amazonaws.com/v1`): a signature for
        # another region would be refused, so it wins over the profile's default.
        region = region or endpoint_region(endpoint)
        self.session = boto3.Session(profile_name=profile, region_name=region)
        self.region = self.session.region_name or "us-east-1"
        self.endpoint = (endpoint or self._discover(stack)).rstrip("/")

    # ------------------------------------------------------------------ the routes

    def list_clusters(self) -> Json:
        return self._call("GET", "/clusters")

    def list_groups(self, cluster: str) -> Json:
        return self._call("GET", _path("clusters", cluster, "groups"))

    def list_nodes(self, cluster: str, group: str | None = None, state: str | None = None) -> list[Json]:
        """Every page of the cluster's nodes (the route is paginated by `next_token`)."""
        query = {k: v for k, v in (("group", group), ("state", state)) if v}
        nodes: list[Json] = []
        while True:
            page = self._call("GET", _path("clusters", cluster, "nodes"), query=query)
            nodes += page["nodes"]
            if not page.get("next_token"):
                return nodes
            query = {**query, "next_token": page["next_token"]}

    def get_node(self, cluster: str, node: str) -> Json:
        return self._call("GET", _path("clusters", cluster, "nodes", node))

    def get_nodes(self, cluster: str, nodes: list[str], workers: int = NODE_WORKERS) -> list[Json]:
        """`get_node` of each node, `workers` requests at a time, in the order given; a node gone in between (HTTP
        404) is left out."""
        if not nodes:
            return []
        self._credentials()  # the credential chain resolved once, before the threads share the session

        def one(node: str) -> Json | None:
            try:
                return self.get_node(cluster, node)
            except ApiError as err:
                if err.status == 404:
                    return None
                raise

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(nodes)))) as pool:
            return [doc for doc in pool.map(one, nodes) if doc is not None]

    def request_checks(
        self, cluster: str, groups: list[str], instances: list[str], checks: list[str] | None = None
    ) -> Json:
        body: Json = {"groups": groups, "instances": instances}
        if checks:
            body["checks"] = checks
        return self._call("POST", _path("clusters", cluster, "checks"), body)

    def get_breakers(self, cluster: str) -> Json:
        return self._call("GET", _path("clusters", cluster, "breakers"))

    def reset_breaker(self, cluster: str, reason: str, group: str | None = None) -> Json:
        body: Json = {"reason": reason, **({"group": group} if group else {})}
        return self._call("POST", _path("clusters", cluster, "breakers", "reset"), body)

    def get_readings(self, cluster: str) -> Json:
        return self._call("GET", _path("clusters", cluster, "readings"))

    def capture(self, cluster: str, node: str) -> Json:
        return self._call("GET", _path("clusters", cluster, "nodes", node, "capture"))

    def slurm_state(
        self, cluster: str, since: tuple[float, str] | None = None, status: Mapping[str, str] | None = None
    ) -> Json:
        """The desired Slurm state of every node: every `next_token` page, `nodes` concatenated into the first.
        `since` (as_of, digest of the last whole document): the answer may be `unchanged: true`, with no nodes.
        `status`: what the bridge says of itself (`bridge`, `synced_at`, `slurmctld`, `errors`, `take_over`), sent
        as query parameters with every page; each answer says the cluster's `fence` and whether this bridge holds
        it (`holder`): the merged document has the last page's fence, and `holder` only if every page said so (a
        take-over between two pages is not missed)."""
        query = {"limit": str(SLURM_STATE_PAGE), **(status or {})}
        if since is not None:
            query |= {"since": repr(since[0]), "digest": since[1]}
        document: Json = self._call("GET", _path("clusters", cluster, "slurm"), query=query)
        while document.get("next_token"):
            query["next_token"] = document["next_token"]
            page = self._call("GET", _path("clusters", cluster, "slurm"), query=query)
            document = {**document, "nodes": document["nodes"] + page["nodes"], "next_token": page.get("next_token")}
            if "fence" in page:
                document |= {"fence": page["fence"], "holder": bool(document.get("holder")) and bool(page["holder"])}
        return document

    def report_occupancy(self, cluster: str, nodes: list[Json]) -> Json:
        """Which nodes run a job (`{"node", "busy"}` each), posted `SLURM_PAGE` at a time; the answers summed."""
        merged: Json = {"updated": 0, "unknown": [], "unknown_count": 0}
        for start in range(0, len(nodes), SLURM_PAGE):
            body = {"nodes": nodes[start : start + SLURM_PAGE]}
            answer = self._call("POST", _path("clusters", cluster, "slurm", "occupancy"), body)
            merged = {
                "updated": merged["updated"] + answer["updated"],
                "unknown": (merged["unknown"] + answer["unknown"])[:20],
                "unknown_count": merged["unknown_count"] + answer.get("unknown_count", len(answer["unknown"])),
            }
        return merged

    # ------------------------------------------------------------------ HTTP

    def _discover(self, stack: str) -> str:
        """The API's URL from the stack's `ApiEndpoint` output."""
        stacks = self.session.client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
        for output in stacks[0].get("Outputs", []):
            if output["OutputKey"] == ENDPOINT_OUTPUT:
                return str(output["OutputValue"])
        raise ApiError(0, f"stack {stack} has no {ENDPOINT_OUTPUT} output; pass --endpoint")

    def _credentials(self) -> Credentials | ReadOnlyCredentials:
        credentials = self.session.get_credentials()
        if credentials is None:
            if urllib.parse.urlparse(self.endpoint).hostname in LOCAL_HOSTS:
                return Credentials("local", "local")
            raise ApiError(0, "no AWS credentials found (use --profile or the standard credential chain)")
        return credentials.get_frozen_credentials()

    def _call(self, method: str, path: str, body: Json | None = None, query: dict[str, str] | None = None) -> Json:
        """One route's answer; a throttled or failed try is sent again up to `retries` times, each signed anew."""
        for attempt in range(self.retries + 1):
            try:
                return self._try(method, path, body, query)
            except _Retry as retry:
                if attempt == self.retries:
                    raise retry.error from None
                backoff = random.uniform(0, RETRY_BASE_S * 2**attempt)
                self.sleep(min(RETRY_MAX_WAIT_S, max(backoff, retry.retry_after_s or 0)))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _try(self, method: str, path: str, body: Json | None, query: dict[str, str] | None) -> Json:
        url = self.endpoint + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = AWSRequest(method=method, url=url, data=data, headers={"Content-Type": "application/json"})
        SigV4Auth(self._credentials(), "execute-api", self.region).add_auth(request)
        prepared = urllib.request.Request(url, data=data, method=method, headers=dict(request.headers.items()))
        try:
            with urllib.request.urlopen(prepared, timeout=30) as response:
                payload = response.read()
        except urllib.error.HTTPError as err:
            error = ApiError(err.code, _message(err.read().decode(errors="replace")))
            if err.code in RETRIED_STATUSES:
                raise _Retry(error, _seconds(err.headers.get("Retry-After"))) from None
            raise error from None
        except urllib.error.URLError as err:
            raise _Retry(ApiError(0, f"cannot reach {self.endpoint}: {err.reason}")) from None
        except (http.client.HTTPException, OSError) as err:  # the connection dropped or timed out mid-answer
            raise _Retry(ApiError(0, f"no answer from {self.endpoint}: {type(err).__name__} {err}".strip())) from None
        try:
            answer: Json = json.loads(payload or b"null")
        except ValueError:
            raise ApiError(0, f"{self.endpoint} answered with something other than JSON") from None
        return answer


def _message(payload: str) -> str:
    """An error answer on one line: its message, or (a 422) what was invalid where; the payload itself otherwise."""
    try:
        answer = json.loads(payload)
    except ValueError:
        return " ".join(payload.split())[:500]
    if not isinstance(answer, dict):
        return " ".join(payload.split())[:500]
    detail = answer.get("detail")
    if isinstance(detail, list) and detail:  # Powertools' validation errors: where and what kind, no message
        invalid = [
            f"{'.'.join(str(p) for p in d.get('loc', ()))} ({d.get('type')})" for d in detail if isinstance(d, dict)
        ]
        return ("invalid " + ", ".join(invalid))[:500]
    message = answer.get("message") or answer.get("Message") or payload  # API Gateway's own denials say "Message"
    return " ".join(str(message).split())[:500]


def _seconds(value: str | None) -> float | None:
    """A Retry-After header's delay in seconds (the HTTP-date form is not used by API Gateway: ignored)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def endpoint_region(endpoint: str | None) -> str | None:
    """The region of an API Gateway endpoint's default host name, or None for any other URL."""
    host = urllib.parse.urlparse(endpoint or "").hostname or ""
    match = re.fullmatch(r"[a-z0-9]+\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com(?:\.cn)?", host)
    return match.group(1) if match else None


def _path(*segments: str) -> str:
    """`/a/b/c` with each segment percent-encoded (a node or cluster name is one segment, whatever it holds)."""
    return "".join("/" + urllib.parse.quote(s, safe="") for s in segments)
