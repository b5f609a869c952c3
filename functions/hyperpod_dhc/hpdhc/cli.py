"""`hpdhc`: the hyperpod-dhc command line.

    hpdhc status [--cluster C] [--group G] [--watch [SECONDS]]            per cluster / group; open breakers, holds
    hpdhc nodes C [--group G] [--state S]                                 per node: logical id and instance id
    hpdhc history C NODE                                                  one node across instance ids
    hpdhc check C (--group G ... | --instance I ...) [--checks T ...]     queue on-demand checks
    hpdhc breakers C                                                      breaker, holds, budgets, held nodes
    hpdhc reset-breaker C [--group G] --reason TEXT                       close a breaker or lift a hold
    hpdhc readings [show] C [--as-fidelity]                               what the cluster was seen to do
    hpdhc readings capture C NODE --out FILE                              the node's last check, as a file
    hpdhc readings classify FILE [--policy FILE] [--json]                 judge a captured check offline
    hpdhc timeline C [--group G] [--out FILE] [--since H] [--until last]  one HTML page: nodes against time
    hpdhc simulate [--scenario FILE] [--json] [--timeline F] [--serve]    the digital twin (a checkout only)
    hpdhc bridge --cluster C [--interval S] [--once] ...                  the Slurm bridge agent (controller node)
    hpdhc gate node-boot --node NAME | gate slurm-conf                    before slurmd starts: no job before the check

The API commands sign with SigV4 from the standard AWS credential chain (--profile, --region) and find the
endpoint in the stack's ApiEndpoint output (--stack) unless --endpoint is given; --json prints the API's JSON
(`timeline`: the page's data, `hyperpod_dhc.hpdhc.timeline.to_json`). A refused request (HTTP 4xx) or one that could not
be made exits with code 2, a server error with 1, each with one line on standard error. A throttled (429) or failed
(5xx) request, or one that could not connect, is sent again up to 3 times with jittered back-off first. A mistyped
argument is one line too (`--state` takes the node states the API knows).

`simulate` runs the controller against a simulated HyperPod cluster; it is the digital twin of a checkout of
hyperpod-dhc (`python -m tests.twin`), which this command runs when the checkout is on the path (`make install`).
`bridge` is the agent that runs on the cluster's Slurm controller node (hyperpod_dhc.hpdhc.bridge; `hpdhc bridge
--help`). `readings classify` needs no API: it judges a captured check with the controller's own rules
(hyperpod_dhc.hpdhc.classify).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, TextIO, cast

from botocore.exceptions import BotoCoreError, ClientError

from hyperpod_dhc.deephealth.evidence.text import printable
from hyperpod_dhc.hpdhc import bridge, classify, gate
from hyperpod_dhc.hpdhc.client import NODE_STATES, ApiError, OperatorClient, add_api_options
from hyperpod_dhc.hpdhc.commands import COMMANDS
from hyperpod_dhc.hpdhc.render import Terminal
from hyperpod_dhc.hpdhc.version import version

SIMULATE = "simulate"
BRIDGE = "bridge"
GATE = "gate"
READINGS = "readings"
READINGS_VERBS = ("show", "capture", "classify")
NO_CHECKOUT = "hpdhc: error: simulate needs a checkout of hyperpod-dhc after `make install`"
RETRIES = 3  # an operator's command rides out a throttle or a cold Lambda's failure; waits ~0.5 + 1 + 2 s at most


class Parser(argparse.ArgumentParser):
    """An argument error is one line that says what to read, not the usage of every option (subcommands' too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [SIMULATE]:
        return simulate(argv[1:])
    if argv[:1] == [BRIDGE]:  # a long-running agent with its own flags and logging, not an API command
        return bridge.main(argv[1:], prog=f"hpdhc {BRIDGE}")
    if argv[:1] == [GATE]:  # run by a node's lifecycle script before slurmd starts
        return gate.main(argv[1:], prog=f"hpdhc {GATE}")
    if argv[:2] == [READINGS, "classify"]:  # offline: no credentials, no API
        return classify.main(argv[2:], prog=f"hpdhc {READINGS} classify")
    if argv[:1] == [READINGS] and len(argv) > 1 and argv[1] not in READINGS_VERBS and not argv[1].startswith("-"):
        argv = [READINGS, "show", *argv[1:]]  # `hpdhc readings CLUSTER`, as before the verbs
    args = parser().parse_args(argv)
    try:
        client = OperatorClient(args.endpoint, args.profile, args.region, args.stack, retries=RETRIES)
        command = f"{args.command} {args.verb}" if args.command == READINGS else args.command
        return COMMANDS[command](client, args, cast(TextIO, Terminal(sys.stdout)))
    except ApiError as err:
        print(f"hpdhc: error: {printable(str(err))}", file=sys.stderr)
        return 2 if 400 <= err.status < 500 or err.status == 0 else 1
    except (BotoCoreError, ClientError) as err:  # finding the endpoint or credentials: not the API's answer
        print(f"hpdhc: error: {printable(str(err))}", file=sys.stderr)
        return 2
    except OSError as err:  # writing --out: a directory that is not there, a full disk
        print(f"hpdhc: error: {printable(str(err))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the way out of `status --watch`
        return 130


def simulate(argv: list[str]) -> int:
    """`hpdhc simulate ...` is `python -m tests.twin ...` of the checkout on the path (its flags, its help)."""
    try:
        from tests.twin.__main__ import main as twin_main
    except ImportError:
        print(NO_CHECKOUT, file=sys.stderr)
        return 2
    return twin_main(argv, prog=f"hpdhc {SIMULATE}")


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="hpdhc", description="hyperpod-dhc command line")
    root.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    api = Parser(add_help=False)
    add_api_options(api)
    api.add_argument("--json", action="store_true", help="print the API's JSON")

    status = sub.add_parser("status", parents=[api], help="progress per cluster or per instance group")
    status.add_argument("--cluster")
    status.add_argument("--group")
    status.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=30.0,
        metavar="SECONDS",
        help="redraw every SECONDS (default 30) until interrupted",
    )
    nodes = sub.add_parser("nodes", parents=[api], help="per node: instance, state, verdict, attempts, timings")
    nodes.add_argument("cluster")
    nodes.add_argument("--group")
    nodes.add_argument("--state", choices=NODE_STATES, help="only nodes in this state: %(choices)s")
    history = sub.add_parser("history", parents=[api], help="one node's history across instance ids")
    history.add_argument("cluster")
    history.add_argument("node", help="NodeLogicalId or instance id")
    check = sub.add_parser("check", parents=[api], help="queue on-demand deep health checks")
    check.add_argument("cluster")
    selection = check.add_mutually_exclusive_group(required=True)
    selection.add_argument("--group", action="append", dest="groups", metavar="GROUP")
    selection.add_argument("--instance", action="append", dest="instances", metavar="ID")
    check.add_argument("--checks", nargs="+", metavar="TYPE", help="InstanceStress InstanceConnectivity ...")
    breakers = sub.add_parser("breakers", parents=[api], help="breaker, capacity holds, budgets and held nodes")
    breakers.add_argument("cluster")
    reset = sub.add_parser("reset-breaker", parents=[api], help="close the breaker (or a group's capacity hold)")
    reset.add_argument("cluster")
    reset.add_argument("--group", help="lift this instance group's bad-capacity hold instead of the cluster breaker")
    reset.add_argument("--reason", required=True, help="why it is safe to act again (kept in the audit trail)")
    observed = sub.add_parser(
        READINGS,
        help="what the cluster was seen to do (show), a node's check as a file (capture), judged offline (classify)",
    )
    verbs = observed.add_subparsers(dest="verb", required=True, metavar="VERB")
    show = verbs.add_parser(
        "show", parents=[api], help="stream names, record shapes, lateness, statuses (`hpdhc readings C` too)"
    )
    show.add_argument("cluster")
    show.add_argument(
        "--as-fidelity",
        action="store_true",
        help="print only the twin's `fidelity` block (a scenario's, for `hpdhc simulate`) of what was seen",
    )
    capture = verbs.add_parser(
        "capture", parents=[api], help="write the node's last check as a captured check (`readings classify` reads it)"
    )
    capture.add_argument("cluster")
    capture.add_argument("node", help="NodeLogicalId or instance id")
    capture.add_argument("--out", metavar="FILE", required=True, help="the captured check to write (JSON)")
    verbs.add_parser(
        "classify",
        add_help=False,
        help="judge a captured check offline, as the controller would (`hpdhc readings classify --help`)",
    )
    pictured = sub.add_parser(
        "timeline",
        parents=[api],
        help="every node's history as one self-contained HTML page: nodes by group against time, rounds, actions",
    )
    pictured.add_argument("cluster")
    pictured.add_argument("--group", help="only this instance group's nodes")
    pictured.add_argument("--out", metavar="FILE", help="the page to write (default timeline-CLUSTER.html)")
    pictured.add_argument(
        "--since", type=float, metavar="HOURS", help="only the last HOURS before the end (default: all history)"
    )
    pictured.add_argument(
        "--until",
        choices=("now", "last"),
        default="now",
        help="end the picture now (default) or at the last recorded change (a twin's `--serve` runs in virtual time)",
    )
    # Parsed elsewhere (main() hands `simulate ...` to the twin, `bridge ...` to hyperpod_dhc.hpdhc.bridge); here for
    # --help only.
    sub.add_parser(
        SIMULATE,
        add_help=False,
        help="run the controller against a simulated HyperPod cluster, no AWS account (a checkout only; "
        "`hpdhc simulate --help`)",
    )
    sub.add_parser(
        BRIDGE,
        add_help=False,
        help="the Slurm bridge agent: drain, resume and label Slurm nodes as the controller says "
        "(`hpdhc bridge --help`)",
    )
    sub.add_parser(
        GATE,
        add_help=False,
        help="keep a new node from jobs until its check passes: `gate node-boot --node NAME` before slurmd "
        "starts; `gate slurm-conf` (`hpdhc gate --help`)",
    )
    return root


if __name__ == "__main__":
    sys.exit(main())
