"""The raw Kubernetes objects the backend reads, as the API server sends them (JSON, camelCase).

Only the fields the backend looks at are declared; every one is optional (`total=False`), because a
server may leave any of them out, so readers use `.get()`. Objects the backend sends are plain dicts:
they come from the rendered manifests.
"""

from __future__ import annotations

from typing import Final, TypedDict

# Kubernetes' own words, as its objects spell them. Some read like our run phases (`constants.RUNNING`,
# `constants.FAILED`) but are another system's: a pod's `status.phase`, a Job or JobSet condition's
# `type`, a RayJob's `jobDeploymentStatus`. They are spelled here alone (tests/test_code_quality.py).
POD_RUNNING: Final = "Running"
POD_SUCCEEDED: Final = "Succeeded"
POD_FAILED: Final = "Failed"
CONDITION_FAILED: Final = "Failed"
DEPLOYMENT_FAILED: Final = "Failed"


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    deletionGracePeriodSeconds: int
    namespace: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    creationTimestamp: str
    deletionTimestamp: str
    resourceVersion: str
    finalizers: list[str]


class Condition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class ContainerStateTerminated(TypedDict, total=False):
    exitCode: int
    signal: int
    startedAt: str
    reason: str
    message: str
    finishedAt: str


class ContainerStateWaiting(TypedDict, total=False):
    reason: str
    message: str


class ContainerStateRunning(TypedDict, total=False):
    startedAt: str


class ContainerState(TypedDict, total=False):
    waiting: ContainerStateWaiting
    running: ContainerStateRunning
    terminated: ContainerStateTerminated


class ContainerStatus(TypedDict, total=False):
    name: str
    image: str
    state: ContainerState
    lastState: ContainerState
    restartCount: int


class PodStatus(TypedDict, total=False):
    phase: str
    nominatedNodeName: str
    startTime: str
    conditions: list[Condition]
    containerStatuses: list[ContainerStatus]
    initContainerStatuses: list[ContainerStatus]


class ResourceRequirements(TypedDict, total=False):
    limits: dict[str, str]
    requests: dict[str, str]


class EnvVar(TypedDict, total=False):
    name: str
    value: str


class Container(TypedDict, total=False):
    name: str
    image: str
    resources: ResourceRequirements
    env: list[EnvVar]


class PodSpec(TypedDict, total=False):
    containers: list[Container]
    initContainers: list[Container]
    nodeName: str


class Pod(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class ReplicatedJobStatus(TypedDict, total=False):
    """One entry of a JobSet's `status.replicatedJobsStatus`: its child Jobs by state."""

    name: str
    ready: int
    succeeded: int
    failed: int
    active: int
    suspended: int


class ReplicatedJob(TypedDict, total=False):
    name: str
    replicas: int


class PodTemplate(TypedDict, total=False):
    spec: PodSpec


class RayGroupSpec(TypedDict, total=False):
    """A RayJob's head group or one of its worker groups."""

    replicas: int
    template: PodTemplate


class RayClusterSpec(TypedDict, total=False):
    headGroupSpec: RayGroupSpec
    workerGroupSpecs: list[RayGroupSpec]


class FailurePolicy(TypedDict, total=False):
    maxRestarts: int  # a JobSet's


class ExitCodesRule(TypedDict, total=False):
    containerName: str
    operator: str  # In, NotIn
    values: list[int]


class PodConditionPattern(TypedDict, total=False):
    type: str
    status: str


class PodFailurePolicyRule(TypedDict, total=False):
    action: str  # FailJob, FailIndex, Ignore, Count
    onExitCodes: ExitCodesRule
    onPodConditions: list[PodConditionPattern]


class PodFailurePolicy(TypedDict, total=False):
    rules: list[PodFailurePolicyRule]


class UncountedTerminatedPods(TypedDict, total=False):
    succeeded: list[str]
    failed: list[str]


class JobObjectSpec(TypedDict, total=False):
    """The spec fields of a Job, a JobSet and a RayJob the backend reads, together."""

    suspend: bool
    backoffLimit: int
    backoffLimitPerIndex: int
    podFailurePolicy: PodFailurePolicy
    failurePolicy: FailurePolicy
    replicatedJobs: list[ReplicatedJob]
    rayClusterSpec: RayClusterSpec


class JobObjectStatus(TypedDict, total=False):
    """The status fields of a Job, a JobSet and a RayJob, together (each kind sets its own)."""

    conditions: list[Condition]
    failed: int
    uncountedTerminatedPods: UncountedTerminatedPods
    startTime: str
    completionTime: str
    ready: int
    restarts: int
    replicatedJobsStatus: list[ReplicatedJobStatus]
    jobStatus: str
    jobDeploymentStatus: str
    endTime: str
    reason: str
    message: str
    rayClusterName: str


class JobObject(TypedDict, total=False):
    """A Job, JobSet or RayJob as read back."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: JobObjectSpec
    status: JobObjectStatus


class WorkloadAdmission(TypedDict, total=False):
    clusterQueue: str


class EvictionCount(TypedDict, total=False):
    reason: str
    underlyingCause: str
    count: int


class SchedulingStats(TypedDict, total=False):
    evictions: list[EvictionCount]


class WorkloadStatus(TypedDict, total=False):
    conditions: list[Condition]
    admission: WorkloadAdmission
    schedulingStats: SchedulingStats


class WorkloadSpec(TypedDict, total=False):
    queueName: str


class Workload(TypedDict, total=False):
    metadata: ObjectMeta
    spec: WorkloadSpec
    status: WorkloadStatus


class Secret(TypedDict, total=False):
    metadata: ObjectMeta
    data: dict[str, str]


class LocalQueueSpec(TypedDict, total=False):
    clusterQueue: str


class LocalQueue(TypedDict, total=False):
    metadata: ObjectMeta
    spec: LocalQueueSpec


class ObjectReference(TypedDict, total=False):
    kind: str
    name: str
    uid: str


class Event(TypedDict, total=False):
    """A core/v1 Event: what a controller says of an object it acts for (`kubectl describe` shows them)."""

    type: str
    reason: str
    message: str
    involvedObject: ObjectReference
    firstTimestamp: str
    lastTimestamp: str
    eventTime: str
