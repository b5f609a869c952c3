"""API Gateway REST (v1) Lambda-proxy events, as the IAM-authorized operator API delivers them."""

from __future__ import annotations

import json
import uuid
from typing import Any


def proxy_event(
    method: str,
    path: str,
    body: Any = None,
    query: dict[str, str] | None = None,
    principal: str = "arn:aws:iam::123456789012:user/operator",
) -> dict[str, Any]:
    request_id = str(uuid.uuid4())
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": {"Content-Type": "application/json", "Host": "api.local"},
        "multiValueHeaders": {},
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": path,
            "httpMethod": method,
            "path": f"/v1{path}",
            "stage": "v1",
            "requestId": request_id,
            "accountId": "123456789012",
            "apiId": "local",
            "protocol": "HTTP/1.1",
            "requestTimeEpoch": 0,
            "identity": {
                "userArn": principal,
                "caller": principal.rsplit("/", 1)[-1],
                "sourceIp": "127.0.0.1",
                "accountId": "123456789012",
                "user": principal.rsplit("/", 1)[-1],
            },
        },
        "body": None if body is None else (body if isinstance(body, str) else json.dumps(body)),
        "isBase64Encoded": False,
    }
