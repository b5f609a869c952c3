"""The operator API client: SigV4-signed HTTPS calls with the standard AWS credential chain."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ENDPOINT_OUTPUT = "ApiEndpoint"


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class OperatorClient:
    def __init__(self, endpoint: str | None, profile: str | None, region: str | None, stack: str) -> None:
        self.session = boto3.Session(profile_name=profile, region_name=region)
        self.region = self.session.region_name or "us-east-1"
        self.endpoint = (endpoint or self._discover(stack)).rstrip("/")

    def _discover(self, stack: str) -> str:
        """The API's URL from the stack's `ApiEndpoint` output."""
        outputs = self.session.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]
        for output in outputs:
            if output["OutputKey"] == ENDPOINT_OUTPUT:
                return output["OutputValue"]
        raise ApiError(0, f"stack {stack} has no {ENDPOINT_OUTPUT} output; pass --endpoint")

    def _credentials(self) -> Credentials:
        credentials = self.session.get_credentials()
        if credentials is None:
            if urllib.parse.urlparse(self.endpoint).hostname in ("127.0.0.1", "localhost"):
                return Credentials("local", "local")  # the twin's local API does not check signatures
            raise ApiError(0, "no AWS credentials found (use --profile or the standard credential chain)")
        return credentials.get_frozen_credentials()

    def call(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> Any:
        url = self.endpoint + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = AWSRequest(method=method, url=url, data=data, headers={"Content-Type": "application/json"})
        SigV4Auth(self._credentials(), "execute-api", self.region).add_auth(request)
        prepared = urllib.request.Request(url, data=data, method=method, headers=dict(request.headers.items()))
        try:
            with urllib.request.urlopen(prepared, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            payload = err.read().decode(errors="replace")
            try:
                answer = json.loads(payload)  # API Gateway's own denials say "Message"
                message = answer.get("message") or answer.get("Message") or payload
            except ValueError:
                message = payload
            raise ApiError(err.code, str(message)[:500]) from None

    def pages(self, path: str, query: dict[str, str], key: str) -> list[dict]:
        items: list[dict] = []
        while True:
            page = self.call("GET", path, query=query)
            items += page[key]
            if not page.get("next_token"):
                return items
            query = {**query, "next_token": page["next_token"]}
