"""How many EFA devices an instance type has: InstanceStress runs an EFA loopback test per device, so a pass needs
one EFA pass line for each (or a line for the EFA test as a whole), and none on a type without EFA (g5 below
8xlarge).

`EFA_DEVICES` is EC2's DescribeInstanceTypes `NetworkInfo.EfaInfo.MaximumEfaInterfaces` (0 where
`EfaSupported` is false) for every type with GPUs or Neuron devices, generated from the copy of DescribeInstanceTypes
that moto ships (`tests/unit/test_efa.py` regenerates it and fails when it moved). A type not listed needs at least
one device's line; a group's policy (`efa_devices`) overrides the table where a cluster's instances differ.
"""

from __future__ import annotations

EFA_DEVICES: dict[str, int] = {
    "g4dn.12xlarge": 1,
    "g4dn.16xlarge": 1,
    "g4dn.2xlarge": 0,
    "g4dn.4xlarge": 0,
    "g4dn.8xlarge": 1,
    "g4dn.metal": 1,
    "g4dn.xlarge": 0,
    "g5.12xlarge": 1,
    "g5.16xlarge": 1,
    "g5.24xlarge": 1,
    "g5.2xlarge": 0,
    "g5.48xlarge": 1,
    "g5.4xlarge": 0,
    "g5.8xlarge": 1,
    "g5.xlarge": 0,
    "g5g.16xlarge": 0,
    "g5g.2xlarge": 0,
    "g5g.4xlarge": 0,
    "g5g.8xlarge": 0,
    "g5g.metal": 0,
    "g5g.xlarge": 0,
    "g6.12xlarge": 1,
    "g6.16xlarge": 1,
    "g6.24xlarge": 1,
    "g6.2xlarge": 0,
    "g6.48xlarge": 1,
    "g6.4xlarge": 0,
    "g6.8xlarge": 1,
    "g6.xlarge": 0,
    "g6e.12xlarge": 1,
    "g6e.16xlarge": 1,
    "g6e.24xlarge": 2,
    "g6e.2xlarge": 0,
    "g6e.48xlarge": 4,
    "g6e.4xlarge": 0,
    "g6e.8xlarge": 1,
    "g6e.xlarge": 0,
    "g6f.2xlarge": 0,
    "g6f.4xlarge": 0,
    "g6f.large": 0,
    "g6f.xlarge": 0,
    "g7.12xlarge": 1,
    "g7.24xlarge": 1,
    "g7.2xlarge": 0,
    "g7.48xlarge": 2,
    "g7.4xlarge": 0,
    "g7.8xlarge": 1,
    "g7e.12xlarge": 1,
    "g7e.24xlarge": 2,
    "g7e.2xlarge": 0,
    "g7e.48xlarge": 4,
    "g7e.4xlarge": 0,
    "g7e.8xlarge": 1,
    "gr6.4xlarge": 0,
    "gr6.8xlarge": 1,
    "gr6f.4xlarge": 0,
    "inf1.24xlarge": 1,
    "inf1.2xlarge": 0,
    "inf1.6xlarge": 0,
    "inf1.xlarge": 0,
    "inf2.24xlarge": 0,
    "inf2.48xlarge": 0,
    "inf2.8xlarge": 0,
    "inf2.xlarge": 0,
    "p3dn.24xlarge": 1,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5.4xlarge": 1,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
    "p6-b300.48xlarge": 16,
    "trn1.2xlarge": 0,
    "trn1.32xlarge": 8,
    "trn1n.32xlarge": 16,
    "trn2.3xlarge": 1,
    "trn2.48xlarge": 16,
}
UNKNOWN_TYPE_DEVICES = 1  # a type the table does not know: at least one device's line


def efa_devices(instance_type: str | None, override: int | None = None) -> int:
    """The EFA pass lines a node of this type needs (HyperPod's `ml.` prefix aside); `override` from policy wins."""
    if override is not None:
        return override
    if not instance_type:
        return UNKNOWN_TYPE_DEVICES
    return EFA_DEVICES.get(instance_type.removeprefix("ml."), UNKNOWN_TYPE_DEVICES)
