"""The operators' REST API: API Gateway in front of the Api Lambda, every method IAM (SigV4) authorized.

Routes (``ROUTES``) use the Lambda proxy integration; the Lambda routes and validates requests itself
(Powertools ``APIGatewayRestResolver`` with pydantic), so there is no API Gateway request validator.
Stage ``v1``: JSON access logs (caller ARN included) to a log group with the configured retention,
execution logging at ERROR without request/response data, X-Ray tracing, and stage-wide throttling.

Deployment precondition: REST API stages log to CloudWatch Logs (access and execution logs alike) only
when the region's API Gateway account settings name a CloudWatch Logs role (``cloudWatchRoleArn``).
That setting is one per account and region, shared by every API there, so this stack does not own it
(``@aws-cdk/aws-apigateway:disableCloudWatchRole``); in a region where it was never set, set it once
(``aws apigateway update-account``) before the first deployment.
"""

from __future__ import annotations

import json

from aws_cdk import Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.acknowledgements import acknowledge

STAGE_NAME = "v1"
THROTTLE_RATE_RPS = 20
THROTTLE_BURST = 40
ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/clusters"),
    ("GET", "/clusters/{cluster}/groups"),
    ("GET", "/clusters/{cluster}/nodes"),
    ("GET", "/clusters/{cluster}/nodes/{node}"),
    ("POST", "/clusters/{cluster}/checks"),
    ("GET", "/clusters/{cluster}/breakers"),
    ("POST", "/clusters/{cluster}/breakers/reset"),
)

F = apigw.AccessLogField
ACCESS_LOG_FORMAT = {
    "requestId": F.context_request_id(),
    "extendedRequestId": F.context_extended_request_id(),
    "requestTime": F.context_request_time(),
    "httpMethod": F.context_http_method(),
    "resourcePath": F.context_resource_path(),
    "path": F.context_path(),
    "status": F.context_status(),
    "responseLength": F.context_response_length(),
    "responseLatency": F.context_response_latency(),
    "integrationStatus": F.context_integration_status(),
    "integrationLatency": F.context_integration_latency(),
    "errorResponseType": F.context_error_response_type(),
    "sourceIp": F.context_identity_source_ip(),
    "userAgent": F.context_identity_user_agent(),
    "accountId": F.context_identity_account_id(),
    "caller": F.context_identity_caller(),
    "userArn": F.context_identity_user_arn(),
}


class OperatorApi(Construct):
    def __init__(
        self, scope: Construct, id: str, *, handler: lambda_.IFunction, log_retention: logs.RetentionDays
    ) -> None:
        super().__init__(scope, id)
        self.access_logs = logs.LogGroup(self, "AccessLogs", retention=log_retention)
        # `$context.error.messageString` is already a quoted JSON string; every other field is quoted here.
        access_log_format = json.dumps(ACCESS_LOG_FORMAT)[:-1] + ', "error": ' + F.context_error_message_string() + "}"
        self.api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=f"{Stack.of(self).stack_name}-operator-api",
            description="hyperpod-dhc operator API (IAM/SigV4 on every method)",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=False,  # the account-wide logging role is not this stack's (see module doc)
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
            deploy_options=apigw.StageOptions(
                stage_name=STAGE_NAME,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.custom(access_log_format),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # never log request or response bodies
                tracing_enabled=True,
                throttling_rate_limit=THROTTLE_RATE_RPS,
                throttling_burst_limit=THROTTLE_BURST,
            ),
        )
        # RestApi adds an `Endpoint` output of its own; the stack exports the URL as `ApiEndpoint`.
        self.api.node.try_remove_child("Endpoint")

        integration = apigw.LambdaIntegration(handler, proxy=True, allow_test_invoke=False)
        self.methods: dict[tuple[str, str], apigw.Method] = {}
        for http_method, path in ROUTES:
            resource = self.api.root.resource_for_path(path)
            self.methods[(http_method, path)] = resource.add_method(
                http_method, integration, authorization_type=apigw.AuthorizationType.IAM
            )

        acknowledge(
            self.api,
            "AwsSolutions-APIG2",
            "Requests are validated in the Lambda with pydantic (Powertools APIGatewayRestResolver with "
            "enable_validation: path, query and body models), which answers 422 naming the bad field; an "
            "API Gateway request validator would duplicate those models in a second, weaker schema.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-APIG3",
            "IAM-authorized internal API: every method requires a SigV4 signature from a principal of this "
            "account with execute-api:Invoke, so anonymous traffic is rejected before the integration; "
            "stage throttling (20 rps, burst 40) bounds what an authorized caller can send. No WAF web ACL.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-COG4",
            "IAM auth is used: every method is AWS_IAM (SigV4) authorized, so operators call it with their "
            "own IAM roles and CloudTrail/access logs record the caller ARN; there are no end users and "
            "hence no Cognito user pool to authorize against.",
        )

    @property
    def url(self) -> str:
        return self.api.url
