"""S3 as both sides reach it: `s3://bucket/prefix` uris, the region and endpoint from the standard AWS
variables, listing a prefix, and what S3's refusals mean in one line. Uses AWS's CRT client
(s3torchconnectorclient, also what the trainer's checkpoints go through): no botocore, no torch, so
the launcher can check a bucket before a local run starts. Credentials are the client's default chain:
the AWS_* variables, a profile, or the pod's service account role (EKS IRSA or Pod Identity).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from training.contract.errors import ConfigError

CHECKPOINT_URI_KEY = "training_config.checkpoint.uri"
READY = ".complete"  # a downloaded copy that is whole


def is_s3(uri: str | None) -> bool:
    return bool(uri) and str(uri).startswith("s3://")


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix without its slashes) of s3://bucket/prefix."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix.strip("/")


def region(key: str) -> str:
    value = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not value:
        raise ConfigError(f"{key} is in S3 but no region is set: set AWS_REGION (a pod on EKS gets it with its "
                          f"service account's role)")
    return value


def client(key: str):
    """AWS's CRT client for the region (and AWS_ENDPOINT_URL, for an S3-compatible store) the environment names."""
    from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client

    return MountpointS3Client(region(key), endpoint=os.environ.get("AWS_ENDPOINT_URL"))


def problem(key: str, uri: str, error: Exception) -> str:
    """One line for what S3 answered about `uri` (set as `key`), with the fix."""
    text = str(error).strip()
    if "bucket does not exist" in text.lower():
        return (f"{key}={uri}: the bucket {split_uri(uri)[0]} does not exist: create it (aws s3 mb "
                f"s3://{split_uri(uri)[0]}) or point {key} at one that does")
    if any(word in text for word in ("Forbidden", "AccessDenied", "credentials", "signature", "Signature",
                                     "InvalidAccessKeyId", "403")):
        return (f"{key}={uri}: S3 refused the credentials ({text[:200]}): give the pods a service account whose role "
                f"may read and write the prefix (cluster.service_account), or set AWS_PROFILE or AWS_ACCESS_KEY_ID "
                f"and AWS_SECRET_ACCESS_KEY for a local run")
    return f"{key}={uri}: S3 answered {text[:300]}"


@contextmanager
def answered(key: str, uri: str):
    """What S3 refuses inside, about `uri` (set as `key`), as one line with the fix (a ConfigError)."""
    from s3torchconnectorclient._mountpoint_s3_client import S3Exception

    try:
        yield
    except S3Exception as e:
        raise ConfigError(problem(key, uri, e)) from None


def listing(s3, key: str, uri: str, prefix: str) -> list:
    """Every object of `uri`'s bucket under `prefix` (one LIST, paged; each with .key, .size, .etag), with `s3`
    a CRT client."""
    with answered(key, uri):
        return [o for page in s3.list_objects(split_uri(uri)[0], prefix) for o in page.object_info]


def objects(s3, key: str, uri: str, prefix: str) -> dict[str, int]:
    """Key -> size of every object under `prefix` (listing)."""
    return {o.key: o.size for o in listing(s3, key, uri, prefix)}


def check_bucket(key: str, uri: str) -> None:
    """The bucket exists and these credentials may list the prefix; one line naming `key` otherwise."""
    prefix = split_uri(uri)[1]
    objects(client(key), key, uri, f"{prefix}/" if prefix else "")


def step_folders(s3, key: str, uri: str) -> tuple[set[int], set[int]]:
    """(complete steps, steps with any object) of the checkpoints under the S3 prefix `uri` (one LIST)."""
    from training.contract.checkpoint_dirs import steps_of_keys

    prefix = split_uri(uri)[1]
    return steps_of_keys(objects(s3, key, uri, f"{prefix}/step-" if prefix else "step-"), prefix)


def checkpoint_steps(key: str, uri: str) -> list[int]:
    """The complete checkpoints' steps under an S3 checkpoint prefix, oldest first."""
    return sorted(step_folders(client(key), key, uri)[0])


def download(key: str, uri: str, cache: Path) -> Path:
    """A local copy of `uri` (set as `key`): the object itself, or every object under the prefix as a
    directory (a `save_pretrained` directory, a folder of data files). Kept in `cache` by the objects'
    names, sizes and ETags: an unchanged uri is not fetched again, a changed one is."""
    s3, (bucket, prefix) = client(key), split_uri(uri)
    found = listing(s3, key, uri, prefix)
    single = [o for o in found if o.key == prefix]
    found = single or [o for o in found if o.key.startswith(f"{prefix}/" if prefix else "") and not o.key.endswith("/")]
    if not found:
        raise ConfigError(f"{key}={uri}: no object is there, nor any under {uri.rstrip('/')}/: check the bucket and key")
    identity = json.dumps([uri, sorted((o.key, o.size, o.etag) for o in found)])
    target = cache / hashlib.sha256(identity.encode()).hexdigest()[:16]
    name = PurePosixPath(prefix).name or bucket  # the file's, or the directory's, name
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{target.name}.lock", "w") as lock:  # nodes sharing a cache (local runs) fetch once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / READY).exists():
            _fetch_objects(s3, key, uri, found, target, name, single)
    return target / name


def _fetch_objects(s3, key: str, uri: str, found: list, target: Path, name: str, single: bool) -> None:
    from s3torchconnectorclient._mountpoint_s3_client import S3Exception

    (bucket, prefix), tmp = split_uri(uri), target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    for o in found:
        path = tmp / name if single else tmp / name / (o.key[len(prefix) + 1:] if prefix else o.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "wb") as f:
                for chunk in s3.get_object(bucket, o.key):
                    f.write(chunk)
        except S3Exception as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ConfigError(problem(key, uri, e)) from None
    (tmp / READY).touch()
    os.replace(tmp, target)


def upload(key: str, directory: Path, uri: str) -> None:
    """Every file under `directory` put under the S3 prefix `uri` (an export's files)."""
    s3, (bucket, prefix) = client(key), split_uri(uri)
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        stream = s3.put_object(bucket, "/".join(part for part in (prefix, path.relative_to(directory).as_posix()) if part))
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                stream.write(chunk)
        stream.close()


def put(s3, key: str, uri: str, data: bytes) -> None:
    """`data` as the object `uri` (s3://bucket/key), visible whole once written; one line on a refusal."""
    with answered(key, uri):
        stream = s3.put_object(*split_uri(uri))
        stream.write(data)
        stream.close()


def get(s3, key: str, uri: str) -> bytes:
    """The object `uri` (s3://bucket/key); one line on a refusal."""
    with answered(key, uri):
        return b"".join(s3.get_object(*split_uri(uri)))


def delete(s3, key: str, uri: str) -> None:
    with answered(key, uri):
        s3.delete_object(*split_uri(uri))
