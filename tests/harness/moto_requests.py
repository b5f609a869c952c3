"""moto_patches (f), the request path: what every botocore request costs on its way through moto, cut, and the
answer left as moto gives it.

- A request is not signed (SigV4's hashes took a fifteenth of a twin run): it carries the date, token and
  Authorization headers (with the credential scope) botocore sets, all that moto reads of them, as moto checks no
  signature.
- moto finds the handler of a URL once a harness, not by matching it against every service's patterns on each
  request (a tenth of a call).
- A JSON-protocol request (a POST to the service's root: DynamoDB, SageMaker, CloudWatch Logs, SSM, Step Functions,
  SQS) becomes moto's werkzeug request from the WSGI environ werkzeug's builder would make of it, made directly:
  building it through werkzeug's test client took a tenth of a DynamoDB call. Anything else goes moto's way.
- moto's `_enrich_response` runs a regular expression over every answer's body to rewrite an XML <RequestId>: a
  body without one is not scanned.
- botocore's `parse_timestamp` makes a dateutil `tzlocal()` for every timestamp it parses (each node's LaunchTime
  in a listing): one, made once, is the same zone.

They reach into moto's, werkzeug's and botocore's internals; `tests/integration/test_moto_patches.py` compares them
with the originals and fails loudly when they move.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import botocore.auth
import botocore.compat
import botocore.exceptions
import botocore.utils
import moto.settings
from botocore.awsrequest import AWSPreparedRequest
from moto.core import botocore_stubber
from moto.core import responses as moto_responses
from moto.core.botocore_stubber import BotocoreStubber
from moto.core.request import PRESERVED_HEADER_NAMES_ENVIRON_KEY, Request

_SIGN = botocore.auth.SigV4Auth.add_auth
_NO_SIGNATURE = "0" * 64


def _unsigned(self: botocore.auth.SigV4Auth, request: AWSPreparedRequest) -> None:
    """A botocore client's SigV4 request without its hashes: the date, token and Authorization headers botocore
    would set, the credential scope (access key, date, region, service) as signed, the signature zeros. Other
    signers (S3's, presigned URLs), a request signed outside a client (the operator CLI's own SigV4) and a moto
    told to check signatures (INITIAL_NO_AUTH_ACTION_COUNT) get botocore's signature."""
    if (
        type(self) is not botocore.auth.SigV4Auth
        or "client_config" not in request.context
        or float("inf") != moto.settings.INITIAL_NO_AUTH_ACTION_COUNT
    ):
        return _SIGN(self, request)
    if self.credentials is None:
        raise botocore.exceptions.NoCredentialsError()
    request.context["timestamp"] = botocore.auth.get_current_datetime().strftime(botocore.auth.SIGV4_TIMESTAMP)
    self._modify_request_before_signing(request)
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={self.scope(request)}, SignedHeaders=host;x-amz-date, Signature={_NO_SIGNATURE}"
    )
    return None


def request_of(request: AWSPreparedRequest) -> Request:
    """moto's werkzeug request of a botocore request (`normalize_request`). A POST of a body to an https root with no
    port or query (a JSON-protocol call) gets the environ werkzeug's EnvironBuilder makes of it, built here; anything
    else (a path, a query, no body, a stream, a header moto drops or keeps the spelling of) is moto's own. botocore's
    headers hold one value a name (a HeadersDict), so none is joined."""
    url = request.url
    body = request.body
    if request.method != "POST" or not isinstance(body, bytes) or not body or not url.startswith("https://"):
        return botocore_stubber.normalize_request(request)
    netloc, slash, rest = url[len("https://") :].partition("/")
    if not slash or rest or not netloc or ":" in netloc:
        return botocore_stubber.normalize_request(request)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "REQUEST_URI": "/",
        "RAW_URI": "/",
        "SERVER_NAME": netloc,
        "SERVER_PORT": "443",
        "HTTP_HOST": netloc,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for key, value in request.headers.items():
        lower = key.lower()
        if "_" in key or lower == "transfer-encoding":
            return botocore_stubber.normalize_request(request)  # kept as spelled, or dropped by moto
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if lower == "content-type":
            environ["CONTENT_TYPE"] = value
        elif lower != "content-length":  # werkzeug counts the body instead
            environ["HTTP_" + key.upper().replace("-", "_")] = value
    environ["CONTENT_LENGTH"] = str(len(body))
    environ[PRESERVED_HEADER_NAMES_ENVIRON_KEY] = {}
    return Request(environ)


def _routed() -> Callable[..., Any]:
    """moto's `process_request`, with the handler of each URL it answered kept: moto matches a URL against every
    service's pattern, then every URL of the service's backend, on every request. A URL moto does not answer
    (passed through, not whitelisted, unknown) goes to moto's own each time."""
    import moto.backends
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.core.base_backend import BackendDict
    from moto.core.exceptions import HTTPException
    from moto.moto_api import recorder

    original = BotocoreStubber.process_request
    handlers: dict[str, Callable[..., Any]] = {}

    def handler_of(url: str) -> Callable[..., Any] | None:
        """What moto's own lookup finds for `url` (a URL without its query), or None where it would not answer."""
        if botocore_stubber.passthrough_url(url):
            return None
        for service, pattern in botocore_stubber.backend_index.backend_url_patterns:
            if pattern.match(url):
                if botocore_stubber.passthrough_service(service) or not botocore_stubber.service_whitelisted(service):
                    return None
                backends: Any = moto.backends.get_backend(service)  # type: ignore[call-overload]
                if isinstance(backends, BackendDict):
                    region = "us-east-1" if "us-east-1" in backends[DEFAULT_ACCOUNT_ID] else "aws"
                    backend = backends[DEFAULT_ACCOUNT_ID][region]
                else:
                    backend = backends["global"]
                return next((f for u, f in backend.urls.items() if re.compile(u).match(url)), None)
        return None

    def process_request(self: BotocoreStubber, request: AWSPreparedRequest) -> Any:
        parsed, _ = botocore_stubber.get_equivalent_url_in_aws_domain(request.url)
        url = f"{parsed.scheme}://{parsed.netloc}{parsed.path}"
        handler = handlers.get(url)
        if handler is None:
            if (handler := handler_of(url)) is None:
                return original(self, request)
            handlers[url] = handler
        normalized = request_of(request)
        try:
            recorder._record_request(normalized)
            return handler(normalized, normalized.raw_url, normalized.headers)
        except HTTPException as e:
            return e.code, e.get_headers(), e.get_body()

    return process_request


_ENRICH = moto_responses.BaseResponse._enrich_response


def _enriched(headers: dict[str, Any], body: Any) -> tuple[dict[str, Any], Any]:
    """moto's `_enrich_response`, which writes the request id into an XML body's <RequestId> with a regular
    expression run over the whole body: a body without one (every JSON answer: a Query's page, a log filter's
    events) is not scanned. The same headers (the request id among them) and the same body."""
    if isinstance(body, str) and "<RequestId>" in body:
        return _ENRICH(headers, body)
    headers, _ = _ENRICH(headers, "")
    return headers, body


_TZLOCAL = functools.cache(botocore.compat.tzlocal)  # dateutil's, which botocore.compat imports


@contextlib.contextmanager
def faster_requests() -> Iterator[None]:
    """moto's and botocore's request path with the patches above."""
    with (
        mock.patch.object(botocore.auth.SigV4Auth, "add_auth", _unsigned),
        mock.patch.object(BotocoreStubber, "process_request", _routed()),
        mock.patch.object(moto_responses.BaseResponse, "_enrich_response", staticmethod(_enriched)),
        mock.patch.object(botocore.utils, "get_tzinfo_options", lambda: (_TZLOCAL,)),
    ):
        yield
