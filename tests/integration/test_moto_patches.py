"""Fails loudly when moto's internals that `tests/harness/moto_patches.py` replaces move or change shape."""

import contextlib
import inspect
import json
from decimal import Decimal
from unittest import mock

import pytest
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

from tests.fakes.hyperpod import GroupSpec


def test_lambda_simple_backend_invoke_signature():
    params = list(inspect.signature(LambdaSimpleBackend.invoke).parameters)
    assert params == ["self", "function_name", "qualifier", "body", "headers", "response_headers"]


def test_wait_function_sleeps_through_wait_interval():
    params = list(inspect.signature(wait_function.WaitFunction._wait_interval).parameters)
    assert params == ["self", "env", "wait_seconds"]


def test_interpreter_threads_are_tracked():
    from moto.stepfunctions.parser.backend import execution_worker

    assert "TMP_THREADS.append" in inspect.getsource(execution_worker.ExecutionWorker.start)


def test_botocore_sleeps_through_its_endpoint_module_time():
    import botocore.endpoint

    assert "time.sleep(handler_response)" in inspect.getsource(botocore.endpoint.Endpoint._needs_retry)


def test_botocore_stubber_answers_every_request_through_its_call():
    from botocore.handlers import BUILTIN_HANDLERS
    from moto.core.botocore_stubber import BotocoreStubber, MockRawResponse
    from moto.core.models import botocore_stubber

    assert list(inspect.signature(BotocoreStubber.__call__).parameters) == ["self", "event_name", "request", "kwargs"]
    assert ("before-send", botocore_stubber) in BUILTIN_HANDLERS, "moto answers requests as a before-send handler"
    assert isinstance(botocore_stubber, BotocoreStubber) and hasattr(botocore_stubber, "enabled")
    assert list(MockRawResponse(b"body").stream()) == [b"body"]


def test_retrier_sleeps_through_its_module_time():
    assert "time.sleep(" in inspect.getsource(retrier_decl)


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_a_retry_back_off_advances_virtual_time_instead_of_sleeping(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    fake.inject_error("StartClusterHealthCheck", "ThrottlingException", times=4)  # beyond botocore's retries
    harness.reconcile()
    harness.wait_for_executions()
    (execution,) = harness.executions()
    assert execution["status"] == "SUCCEEDED"
    assert harness.retry_back_offs, "the workflow's Retry ran on virtual time"
    errors = [e for e in harness.history(execution["executionArn"]) if e["type"] == "LambdaFunctionFailed"]
    assert errors and errors[0]["lambdaFunctionFailedEventDetails"]["error"] == "Throttled"


def test_the_table_query_names_what_the_partition_read_binds():
    """moto_dynamodb reads these of Table.query's arguments by name: renamed, the patch would pass every Query
    through unchanged (still right, the old speed), so say it here."""
    from moto.dynamodb.models.table import Table

    params = inspect.signature(Table.query).parameters
    assert {"hash_key", "exclusive_start_key", "scan_index_forward", "index_name"} <= set(params)
    assert {"hash_key_conditions", "range_key_conditions", "filter_kwargs", "projection_expressions"} <= set(params)
    assert list(inspect.signature(Table.sorted_items).parameters) == [
        "self",
        "hash_key_attrs",
        "range_key_attrs",
        "items",
    ]


def _query_pages(table, **query):
    """Every page of a Query: its items, LastEvaluatedKey, Count and ScannedCount."""
    pages = []
    while len(pages) < 100:  # a start key served wrong could page forever
        page = table.query(**query)
        pages.append((page["Items"], page.get("LastEvaluatedKey"), page["Count"], page["ScannedCount"]))
        if "LastEvaluatedKey" not in page:
            return pages
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    raise AssertionError(f"a Query still paging after {len(pages)} pages")


def test_a_query_answers_page_for_page_as_moto_does():
    """moto_dynamodb reads a Query's partition from its start key, sorts on cast values and writes string and
    number attribute values as they are: every page the same as moto's own, forward and backward, with a key
    condition, a GSI (every range comparison), a projection, a limit (one filled exactly included) and pages cut by
    size; a scan, a GetItem and a BatchGetItem, with attribute values of every type."""
    import boto3
    from boto3.dynamodb.conditions import Key
    from moto import mock_aws

    from tests.harness import moto_patches

    def answers() -> list:
        with mock_aws():
            ddb = boto3.resource("dynamodb", region_name="us-east-1")
            table = ddb.create_table(
                TableName="t",
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in
                                      (("pk", "S"), ("sk", "S"), ("saved_at", "N"))],
                GlobalSecondaryIndexes=[{"IndexName": "saved", "Projection": {"ProjectionType": "KEYS_ONLY"},
                                         "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"},
                                                       {"AttributeName": "saved_at", "KeyType": "RANGE"}]}],
                BillingMode="PAY_PER_REQUEST",
            )  # fmt: skip
            for i in range(240):  # three partitions, keys out of order, saved_at repeating; 2.4 MB a partition
                pk, sk = f"c#{i % 3}", f"{'node' if i % 5 else 'meta'}#{(i * 37) % 240:03d}"
                more = {"m": {"a": i, "b": "x", "l": [i, "y", True, None]}, "ss": {"a", "b"}, "ns": {1, i + 2},
                        "blob": b"\x00\xff", "flag": i % 2 == 0, "none": None, "empty": ""}  # fmt: skip
                more = more if i % 4 == 0 else {}
                table.put_item(Item={"pk": pk, "sk": sk, "saved_at": i // 7, "doc": "x" * (30000 + i), **more})
            table.delete_item(Key={"pk": "c#1", "sk": "node#037"})
            queries = [
                {"KeyConditionExpression": Key("pk").eq("c#1")},
                {"KeyConditionExpression": Key("pk").eq("c#1"), "Limit": 7},
                {"KeyConditionExpression": Key("pk").eq("c#2"), "Limit": 9, "ScanIndexForward": False},
                {"KeyConditionExpression": Key("pk").eq("c#0") & Key("sk").begins_with("node#"), "Limit": 11,
                 "ProjectionExpression": "#doc, sk", "ExpressionAttributeNames": {"#doc": "doc"}},
                {"KeyConditionExpression": Key("pk").eq("c#9")},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#1") & Key("saved_at").gte(12)},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#2"), "Limit": 5},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#1") & Key("saved_at").gte(12),
                 "ScanIndexForward": False},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#0") & Key("saved_at").gte(30),
                 "Limit": 1},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#0") & Key("saved_at").between(3, 20),
                 "Limit": 4},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#2") & Key("saved_at").lt(5)},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#2") & Key("saved_at").lt(5),
                 "Limit": 4},
                {"KeyConditionExpression": Key("pk").eq("c#0") & Key("sk").begins_with("meta#"), "Limit": 16},
                {"KeyConditionExpression": Key("pk").eq("c#0") & Key("sk").begins_with("meta#"), "Limit": 5},
                {"KeyConditionExpression": Key("pk").eq("c#1") & Key("sk").lt("node#100"), "Limit": 40},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#2") & Key("saved_at").eq(9)},
                {"IndexName": "saved", "KeyConditionExpression": Key("pk").eq("c#9") & Key("saved_at").gt(0)},
            ]  # fmt: skip
            pages = [_query_pages(table, **q) for q in queries]
            pages.append(table.scan()["Items"])
            pages.append(table.get_item(Key={"pk": "c#0", "sk": "meta#000"})["Item"])
            keys = [
                {"pk": f"c#{i % 3}", "sk": f"{'node' if i % 5 else 'meta'}#{(i * 37) % 240:03d}"} for i in range(30)
            ]
            batch = ddb.meta.client.batch_get_item(RequestItems={"t": {"Keys": keys}})["Responses"]["t"]
            pages.append(sorted(batch, key=lambda item: (item["pk"], item["sk"])))
            return pages

    expected = answers()
    assert any(len(p) > 2 for p in expected[:1]), "pages cut by size (1 MB) as well as by Limit"
    with moto_patches.patched(on_wait=lambda s: None):
        assert answers() == expected


def test_a_query_of_number_keys_a_hash_only_table_and_a_deleted_start_key_answers_as_moto_does():
    import boto3
    from boto3.dynamodb.conditions import Key
    from moto import mock_aws

    from tests.harness import moto_patches

    def answers() -> list:
        with mock_aws():
            ddb = boto3.resource("dynamodb", region_name="us-east-1")
            numbered = ddb.create_table(
                TableName="n",
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "at", "KeyType": "RANGE"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                      {"AttributeName": "at", "AttributeType": "N"}],
                BillingMode="PAY_PER_REQUEST",
            )  # fmt: skip
            hashed = ddb.create_table(
                TableName="h",
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            for i, at in enumerate(["1", "1.5", "10", "2", "-3", "100.25", "9", "0.5", "20", "3"] * 3):
                numbered.put_item(Item={"pk": f"p{i % 2}", "at": Decimal(at) + i, "v": i})
                hashed.put_item(Item={"pk": f"h{i}", "v": i})
            out = [_query_pages(numbered, KeyConditionExpression=Key("pk").eq("p1"), Limit=4),
                   _query_pages(numbered, KeyConditionExpression=Key("pk").eq("p0") & Key("at").gt(5), Limit=3),
                   _query_pages(hashed, KeyConditionExpression=Key("pk").eq("h7")),
                   _query_pages(hashed, KeyConditionExpression=Key("pk").eq("nobody"))]  # fmt: skip
            first = numbered.query(KeyConditionExpression=Key("pk").eq("p0"), Limit=5)
            numbered.delete_item(Key=first["LastEvaluatedKey"])  # the next page starts from a key that is gone
            rest = _query_pages(numbered, KeyConditionExpression=Key("pk").eq("p0"), Limit=5,
                                ExclusiveStartKey=first["LastEvaluatedKey"])  # fmt: skip
            return [*out, first["Items"], rest]

    expected = answers()
    with moto_patches.patched(on_wait=lambda s: None):
        assert answers() == expected


def test_a_page_is_cut_by_the_size_of_the_items_its_key_condition_holds():
    """Where moto_dynamodb answers otherwise than moto: DynamoDB reads only the items a Query's key condition holds
    (a filter is applied after the read), so only their size fills a page's 1 MB. moto counted the items after them
    that the condition leaves out, and ended a page there: a LastEvaluatedKey, then an empty page."""
    import boto3
    from boto3.dynamodb.conditions import Key
    from moto import mock_aws

    from tests.harness import moto_patches

    with mock_aws(), moto_patches.patched(on_wait=lambda s: None):
        table = boto3.resource("dynamodb", region_name="us-east-1").create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in
                                  (("pk", "S"), ("sk", "S"), ("at", "N"))],
            GlobalSecondaryIndexes=[{"IndexName": "byat", "Projection": {"ProjectionType": "KEYS_ONLY"},
                                     "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"},
                                                   {"AttributeName": "at", "KeyType": "RANGE"}]}],
            BillingMode="PAY_PER_REQUEST",
        )  # fmt: skip
        for i in range(33):  # 33 x 30 kB held by the key conditions below, then 300 kB that neither holds
            table.put_item(Item={"pk": "p", "sk": f"node#{i:02d}", "at": i, "doc": "x" * 30000})
        table.put_item(Item={"pk": "p", "sk": "round", "at": 99, "doc": "x" * 300000})
        nodes = _query_pages(table, KeyConditionExpression=Key("pk").eq("p") & Key("sk").begins_with("node#"))
        early = _query_pages(table, IndexName="byat", KeyConditionExpression=Key("pk").eq("p") & Key("at").lt(33))
    assert [len(items) for items, *_ in nodes] == [33] and nodes[0][1] is None
    assert [len(items) for items, *_ in early] == [33] and early[0][1] is None


def _log_pages(logs, **query):
    """Every page of a FilterLogEvents query: its events and nextToken."""
    pages = []
    while len(pages) < 100:
        page = logs.filter_log_events(**query)
        pages.append((page["events"], page.get("nextToken")))
        if "nextToken" not in page:
            return pages
        query["nextToken"] = page["nextToken"]
    raise AssertionError(f"a FilterLogEvents query still paging after {len(pages)} pages")


def _result_streams(backend, group: str, start: int, count: int) -> None:
    """Streams of result lines appended as the twin appends them: through moto's backend, mostly in order, some
    late (earlier timestamps after later ones) and some sharing a timestamp."""
    log_group = backend.groups[group]
    for i in range(start, start + count):
        name = f"DeepHealthCheckResults/i-{i % 7:02d}" if i % 3 else f"Other/i-{i % 5:02d}"
        if name not in log_group.streams:
            log_group.create_log_stream(name)
        stamp = 1_000_000 + (i // 20) * 10_000 - (30_000 if i % 11 == 0 else 0)  # equal stamps, and late ones
        line = f"{'ERROR' if i % 6 == 0 else 'INFO'} line {i}"
        log_group.streams[name].put_log_events([{"timestamp": stamp, "message": line}])


def test_filter_log_events_answers_page_for_page_as_moto_does():
    """moto_logs keeps each stream's events in timestamp order and reads a query's window by bisection, from the
    streams that reach it: every page the same events, in the same order, with the same tokens as moto's own, before
    and after more events come (some of them late), a stream is deleted and made again, and a new one is written."""
    import boto3
    from moto import mock_aws
    from moto.logs import models as logs_models
    from moto.logs.models import logs_backends

    from tests.harness import moto_patches

    def answers() -> list:
        with mock_aws():
            logs = boto3.client("logs", region_name="us-east-1")
            logs.create_log_group(logGroupName="g")
            backend = logs_backends["123456789012"]["us-east-1"]
            queries = [
                {},
                {"startTime": 1_040_000},
                {"startTime": 1_040_000, "endTime": 1_090_000},
                {"startTime": 1_040_000, "limit": 7},
                {"startTime": 1_010_000, "limit": 5, "filterPattern": "%ERROR|line 1%"},
                {"startTime": 1_010_000, "interleaved": True, "limit": 9},
                {"logStreamNames": ["DeepHealthCheckResults/i-03", "Other/i-01"], "startTime": 1_020_000},
                {"endTime": 1_030_000, "filterPattern": "INFO"},
                {"startTime": 9_000_000},
                {"startTime": 0, "endTime": 0},  # 0 is no bound, as moto reads it
            ]
            pages = []
            for start, count in ((0, 120), (120, 40), (160, 1)):
                _result_streams(backend, "g", start, count)
                pages += [_log_pages(logs, logGroupName="g", **q) for q in queries]
            # Through the API: a stream deleted and made again (last in the group's order now), a new one.
            logs.delete_log_stream(logGroupName="g", logStreamName="DeepHealthCheckResults/i-02")
            for name in ("DeepHealthCheckResults/i-02", "DeepHealthCheckResults/i-99"):
                logs.create_log_stream(logGroupName="g", logStreamName=name)
                logs.put_log_events(
                    logGroupName="g", logStreamName=name, logEvents=[{"timestamp": 1_045_000, "message": "INFO new"}]
                )
            pages += [_log_pages(logs, logGroupName="g", **q) for q in queries]
            return [[_plain(events, token) for events, token in query] for query in pages]

    with mock.patch.object(logs_models, "EventMessageFilter", moto_patches.CloudWatchFilter):  # (e) alone
        expected = answers()
    assert any(len(p) > 2 for p in expected), "queries of several pages"
    with moto_patches.patched(on_wait=lambda s: None):
        assert answers() == expected


def _plain(events: list, token: str | None) -> tuple:
    """A page without what differs between two runs (moto numbers events per process and stamps ingestion with
    wall time): each event's stream, timestamp and message (unique here), and the token's event by its message."""
    messages = {e["eventId"]: e["message"] for e in events}
    plain = [(e["logStreamName"], e["timestamp"], e["message"]) for e in events]
    if token is None:
        return plain, None
    group, stream, event_id = token.split("@")
    return plain, (group, stream, messages[event_id])


def test_filter_log_events_answers_as_aws_where_moto_does_not():
    """Where moto_logs answers otherwise than moto, as AWS documents FilterLogEvents: `searchedLogStreams` is empty
    (no longer supported since May 2020), `logStreamNamePrefix` keeps only the streams it starts (moto ignored it),
    and it is refused together with `logStreamNames`."""
    import boto3
    from moto import mock_aws
    from moto.logs.models import logs_backends

    from tests.harness import moto_patches

    with mock_aws(), moto_patches.patched(on_wait=lambda s: None):
        logs = boto3.client("logs", region_name="us-east-1")
        logs.create_log_group(logGroupName="g")
        _result_streams(logs_backends["123456789012"]["us-east-1"], "g", 0, 60)
        page = logs.filter_log_events(logGroupName="g", logStreamNamePrefix="DeepHealthCheckResults/")
        everything = logs.filter_log_events(logGroupName="g")["events"]
        assert page["searchedLogStreams"] == []
        assert len(everything) == 60
        assert page["events"] == [e for e in everything if e["logStreamName"].startswith("DeepHealthCheckResults/")]
        assert 0 < len(page["events"]) < 60
        with pytest.raises(logs.exceptions.InvalidParameterException):
            logs.filter_log_events(logGroupName="g", logStreamNamePrefix="D", logStreamNames=["Other/i-01"])


def test_a_request_carries_the_headers_moto_reads_without_a_signature_and_other_signers_still_sign():
    """moto_patches (f): a client's SigV4 requests keep the Authorization header's credential scope (moto reads the
    access key, region and service there), the date and the session token; only the hashes are left out. S3's
    signer, a presigned URL, the operator CLI's own SigV4 (no client) and a moto told to check signatures still
    get botocore's signature."""
    import boto3
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.exceptions import ClientError
    from moto import mock_aws, settings

    from tests.harness import moto_patches

    def headers_sent(client, into):
        client.meta.events.register(
            "before-send",
            lambda request, **_: into.append(
                {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
            ),
        )

    zeros = "Signature=" + "0" * 64
    sent, s3_sent = [], []
    with mock_aws(), moto_patches.patched(on_wait=lambda s: None):
        sqs = boto3.client("sqs", region_name="eu-west-1")
        headers_sent(sqs, sent)
        credentials = sqs._get_credentials().get_frozen_credentials()
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        assert sqs.get_queue_url(QueueName="q")["QueueUrl"] == url
        s3 = boto3.client("s3", region_name="eu-west-1", config=Config(signature_version="s3v4"))
        headers_sent(s3, s3_sent)
        s3.create_bucket(Bucket="bucket-b", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        presigned = s3.generate_presigned_url("get_object", Params={"Bucket": "bucket-b", "Key": "k"})
        cli_request = AWSRequest(method="GET", url="https://api.example.com/prod/clusters")
        SigV4Auth(credentials, "execute-api", "eu-west-1").add_auth(cli_request)
        with mock.patch.object(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0.0), pytest.raises(ClientError):
            sqs.list_queues()  # moto checks the signature now, and knows no IAM user of the test's key
    first, second, checked = sent
    assert credentials.token, "conftest sets a session token: its header is asserted below"
    scope, signed, signature = first["Authorization"].removeprefix("AWS4-HMAC-SHA256 ").split(", ")
    access_key, day, region, service, terminator = scope.removeprefix("Credential=").split("/")
    assert (access_key, region, service, terminator) == (credentials.access_key, "eu-west-1", "sqs", "aws4_request")
    assert first["X-Amz-Date"].startswith(day) and first.get("X-Amz-Security-Token") == credentials.token
    assert signed == "SignedHeaders=host;x-amz-date" and signature == zeros
    assert second["Authorization"].endswith(zeros)
    assert "Signature=" in checked["Authorization"] and not checked["Authorization"].endswith(zeros)
    (bucket,) = s3_sent
    assert "Signature=" in bucket["Authorization"] and not bucket["Authorization"].endswith(zeros)
    assert "X-Amz-Signature=" in presigned and "X-Amz-Signature=" + "0" * 64 not in presigned
    cli_auth = cli_request.headers["Authorization"]
    assert "/execute-api/aws4_request" in cli_auth and not cli_auth.endswith(zeros)


def test_a_url_is_answered_by_the_handler_moto_finds_for_it_errors_included():
    """moto_patches (f): a URL's handler is found once and kept (a query does not change it); the first request and
    the later ones get the same
    answers as moto's own lookup gives, a service's errors included (raised by its handler, or answered), and a URL
    moto does not serve still gets moto's own answer."""
    import boto3
    import moto.backends
    from botocore.awsrequest import AWSPreparedRequest
    from botocore.exceptions import ClientError
    from moto import mock_aws
    from moto.core.botocore_stubber import BotocoreStubber
    from moto.core.exceptions import JsonRESTError
    from moto.moto_api import recorder
    from moto.ssm import urls as ssm_urls

    def refuse(*args, **kwargs):
        raise JsonRESTError("ValidationException", "refused by the test")

    from tests.harness import moto_patches

    def session(patched: bool) -> list:
        answers: list = []
        with (
            mock_aws(),
            moto_patches.patched(on_wait=lambda s: None) if patched else contextlib.nullcontext(),
            mock.patch.object(moto.backends, "get_backend", side_effect=moto.backends.get_backend) as lookups,
            mock.patch.object(recorder, "_record_request", side_effect=recorder._record_request) as recorded,
        ):
            with mock.patch.dict(ssm_urls.url_paths, {"{0}/$": refuse}):
                for _ in range(2):
                    try:
                        boto3.client("ssm").get_parameter(Name="p")
                    except ClientError as err:
                        answers.append(
                            (err.response["Error"]["Message"], err.response["ResponseMetadata"]["HTTPStatusCode"])
                        )
            ddb = boto3.client("dynamodb")
            for _ in range(2):
                try:
                    ddb.get_item(TableName="missing", Key={"pk": {"S": "a"}})
                except ClientError as err:
                    answers.append((err.response["Error"]["Code"], err.response["ResponseMetadata"]["HTTPStatusCode"]))
            ddb.create_table(
                TableName="t",
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            ddb.put_item(TableName="t", Item={"pk": {"S": "a"}})
            answers += [ddb.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"] for _ in range(2)]
            answers.append(boto3.client("logs").describe_log_groups()["logGroups"])
            stubber = BotocoreStubber()
            stubber.enabled = True
            request = mock.Mock(url="https://nothing.amazonaws.com/x", method="GET", headers={}, body=b"")
            answers.append(stubber.process_request(request))
            if patched:
                # Each service's backend was looked up once (ssm, dynamodb, logs), whatever a URL's query; every
                # request answered (ssm 2, dynamodb 6 and the listing, logs 1) went past moto's recorder.
                dynamodb = "https://dynamodb.us-east-1.amazonaws.com/"
                target = {"X-Amz-Target": "DynamoDB_20120810.ListTables", "Content-Type": "application/x-amz-json-1.0"}
                listing = AWSPreparedRequest("POST", dynamodb + "?a=1", target, b"{}", stream_output=False)
                assert stubber.process_request(listing)[0] == 200
                assert [c.args[0] for c in lookups.call_args_list] == ["ssm", "dynamodb", "logs"]
                assert recorded.call_count == 10
        return answers

    patched = session(patched=True)
    assert patched == session(patched=False)
    assert patched[:4] == [("refused by the test", 400)] * 2 + [("ResourceNotFoundException", 400)] * 2
    assert patched[-1] == (404, {}, "Not yet implemented")


def _environ(request) -> dict:
    """A werkzeug request's environ, its body read out and the objects that differ between two builds left out."""
    environ = {k: v for k, v in request.environ.items() if k not in ("wsgi.input", "werkzeug.request")}
    return {**environ, "body": request.get_data()}


def test_a_json_request_gets_the_environ_moto_builds_and_anything_else_is_built_by_moto():
    """moto_requests: a POST of a body to a service's https root (every JSON-protocol call, and a query-protocol
    form) gets the environ moto's own `normalize_request` builds through werkzeug, down to the last key; a request
    it does not cover (a path, a query, no body, a text body, a port, a header werkzeug would drop or moto keeps as
    spelled) is built by moto."""
    from botocore.awsrequest import AWSPreparedRequest
    from moto.core import botocore_stubber

    from tests.harness import moto_requests

    root = "https://dynamodb.us-east-1.amazonaws.com/"
    json_headers = {
        "X-Amz-Target": "DynamoDB_20120810.GetItem",
        "Content-Type": "application/x-amz-json-1.0",
        "User-Agent": b"Boto3/1.40 md/Botocore#1.44.8",
        "X-Amz-Date": "20261207T000000Z",
        "Authorization": "AWS4-HMAC-SHA256 Credential=AK/20261207/us-east-1/dynamodb/aws4_request, Signature=00",
        "Content-Length": "999",  # werkzeug counts the body instead
        "amz-sdk-invocation-id": "b0e4",
    }
    body = b'{"TableName": "t", "Key": {"pk": {"S": "a"}}}'
    built_here = [
        AWSPreparedRequest("POST", root, json_headers, body, stream_output=False),
        AWSPreparedRequest("POST", root, {**json_headers, "Host": "other.example"}, body, stream_output=False),
        AWSPreparedRequest("POST", root, {"X-Amz-Target": "SageMaker.ListClusterNodes"}, b"{}", stream_output=False),
        AWSPreparedRequest(  # SNS's query protocol: a form POSTed to the root
            "POST", root, {"Content-Type": "application/x-www-form-urlencoded"}, b"Action=Publish", stream_output=False
        ),
    ]
    built_by_moto = [
        AWSPreparedRequest("POST", root + "?a=b%20c", json_headers, body, stream_output=False),
        AWSPreparedRequest(
            "POST", root + "2015-03-31/functions/f/invocations", json_headers, body, stream_output=False
        ),
        AWSPreparedRequest("GET", root, json_headers, body, stream_output=False),
        AWSPreparedRequest("POST", root, json_headers, b"", stream_output=False),
        AWSPreparedRequest("POST", root, json_headers, body.decode(), stream_output=False),
        AWSPreparedRequest("POST", root.replace(".com/", ".com:8443/"), json_headers, body, stream_output=False),
        AWSPreparedRequest("POST", root, {**json_headers, "x-amz-meta-my_key": "v"}, body, stream_output=False),
        AWSPreparedRequest("POST", root, {**json_headers, "Transfer-Encoding": "chunked"}, body, stream_output=False),
    ]
    with mock.patch.object(
        botocore_stubber, "normalize_request", side_effect=botocore_stubber.normalize_request
    ) as moto_built:
        for request in built_here + built_by_moto:
            ours = moto_requests.request_of(request)
            assert _environ(ours) == _environ(botocore_stubber.normalize_request(request)), request
            assert ours.raw_url == botocore_stubber.normalize_request(request).raw_url
    assert moto_built.call_count == 2 * len(built_here) + 3 * len(built_by_moto)


def test_an_answer_gets_moto_s_request_id_and_only_an_xml_body_is_rewritten():
    """moto_requests: every answer gets its request id header as moto gives it; an XML body's <RequestId> takes it
    as moto writes it; a JSON (or bytes) body is returned as it was, never scanned."""
    import re

    from moto.core import responses as moto_responses

    from tests.harness import moto_requests

    json_body = '{"Items": [{"pk": {"S": "a"}}]}'
    with mock.patch.object(moto_responses.re, "sub", side_effect=re.sub) as scans:
        headers, body = moto_requests._enriched({"status": 200}, json_body)
        assert body == json_body and headers["status"] == "200" and len(headers["x-amzn-requestid"]) == 52
        assert json_body not in [c.args[2] for c in scans.call_args_list]
        assert moto_requests._enriched({}, b"<RequestId>x</RequestId>")[1] == b"<RequestId>x</RequestId>"
        headers, body = moto_requests._enriched({}, "<R><RequestId>old</RequestId></R>")
        assert body == f"<R><RequestId>{headers['x-amzn-requestid']}</RequestId></R>"


def test_timestamps_parse_to_the_same_instants_in_one_local_zone_and_gc_thresholds_come_back():
    """moto_requests: botocore parses a timestamp to the same instant and zone as unpatched, with one tzlocal;
    moto_patches: the cycle collector's thresholds are the harness's while it runs, and what they were after."""
    import gc

    import botocore.utils

    from tests.harness import moto_patches

    unpatched = [botocore.utils.parse_timestamp(v) for v in (1790000000, "1790000000.5", "2026-12-07T10:00:00Z")]
    before = gc.get_threshold()
    with moto_patches.patched(on_wait=lambda s: None):
        patched = [botocore.utils.parse_timestamp(v) for v in (1790000000, "1790000000.5", "2026-12-07T10:00:00Z")]
        assert gc.get_threshold() == moto_patches.GC_THRESHOLDS
    assert gc.get_threshold() == before
    assert patched == unpatched and [p.utcoffset() for p in patched] == [u.utcoffset() for u in unpatched]
    assert patched[0].tzinfo is patched[1].tzinfo


def test_a_queue_keeps_what_its_retention_period_keeps_as_moto_does():
    """moto_patches: SQS reads a queue's retention period alone, not its every attribute per message received; a
    receive answers the same messages as moto, and one older than the period ends it as moto's does."""
    import boto3
    from moto import mock_aws
    from moto.sqs.models import SQSBackend

    from tests.harness import moto_patches

    def bodies(patch: bool) -> list[list[str]]:
        with mock_aws(), moto_patches.patched(on_wait=lambda s: None) if patch else contextlib.nullcontext():
            sqs = boto3.client("sqs", region_name="us-east-1")
            url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
            for i in range(12):
                sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
            with mock.patch("moto.sqs.models.unix_time_millis", return_value=1_000_000):  # sent long ago
                sqs.send_message(QueueUrl=url, MessageBody="old")
            pages = []
            while got := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
                pages.append([m["Body"] for m in got])
                for m in got:
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            return pages

    assert "get_queue_attributes" in inspect.getsource(SQSBackend.is_message_valid_based_on_retention_period)
    pages = bodies(patch=True)
    assert pages == bodies(patch=False)
    assert pages == [[f"m{i}" for i in range(10)], ["m10", "m11"]]  # "old" ends its receive, unreturned


def test_a_program_and_a_json_path_parsed_once_hold_no_execution_state(controller_template):
    """tests/harness/moto_stepfunctions.py shares one parsed program among executions running at once: only Map
    and Parallel components keep state of their own, and the workflow has neither; and it caches the parses the
    interpreter makes at these three places."""
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    resources = controller_template.template["Resources"].items()
    functions = [name for name, r in resources if r["Type"] == "AWS::Lambda::Function"]
    arns = {name: f"arn:aws:lambda:us-east-1:123456789012:function:{name}" for name in functions}
    definition = json.loads(controller_template.definition(arns))
    types = {state["Type"] for state in definition["States"].values()}
    assert types.isdisjoint({"Map", "Parallel"}), types
    assert "AmazonStateLanguageParser.parse(" in inspect.getsource(ExecutionWorker._get_evaluation_entrypoint)
    assert "parse(path)" in inspect.getsource(json_path.extract_json)
    assert "parse(self.result_path_src)" in inspect.getsource(result_path)


def test_every_component_of_a_shared_program_has_its_heap_key_made_at_the_parse(controller_template):
    """Executions sharing a program must not each make a component's `heap_key` (the store of its Retry counts)."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    from tests.harness.moto_stepfunctions import components, keyed

    resources = controller_template.template["Resources"].items()
    arns = {
        name: f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
        for name, r in resources
        if r["Type"] == "AWS::Lambda::Function"
    }
    definition = controller_template.definition(arns)
    program = keyed(AmazonStateLanguageParser.parse(definition)[0])
    found = list(components(program))
    # The walk reaches every Retry rule of the workflow (one MaxAttempts each, default or not).
    retriers = sum(len(state.get("Retry", [])) for state in json.loads(definition)["States"].values())
    assert retriers and sum(type(c).__name__ == "MaxAttemptsDecl" for c in found) == retriers
    assert all(c._EvalComponent__heap_key is not None for c in found)
