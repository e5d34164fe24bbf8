"""The part of kustomize that deploy/kubernetes/ uses, to render its overlays where there is
no kustomize binary: resources (files and folders), namespace, labels (metadata only),
images, and strategic-merge patches (`$patch: delete` included). A kustomization field
outside that part fails the render, so the manifests cannot drift into what this does not
do the way kustomize does."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]

KNOWN = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "patches"}
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
              "envFrom": None, "ports": "containerPort", "volumes": "name",
              "volumeMounts": "mountPath"}
"""Lists merged by key (as Kubernetes' strategic merge patch does for these fields); None:
replaced whole. Any other list is replaced whole too."""
CLUSTER_KINDS = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                 "StorageClass", "PersistentVolume"}


def render(folder: Path) -> list[Doc]:
    """Every resource `folder`'s kustomization.yaml makes, as kustomize builds them."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KNOWN
    if unknown:
        raise ValueError(f"{folder}: kustomization fields not rendered here: {sorted(unknown)}")
    docs: list[Doc] = []
    for entry in kustomization.get("resources", []):
        path = folder / entry
        docs += render(path) if path.is_dir() else load(path)
    for patch in kustomization.get("patches", []):
        if set(patch) != {"path"}:
            raise ValueError(f"{folder}: only patches by path are rendered here: {patch}")
        for change in load(folder / patch["path"]):
            docs = patched(docs, change)
    for doc in docs:
        if "namespace" in kustomization and doc["kind"] not in CLUSTER_KINDS:
            doc["metadata"]["namespace"] = kustomization["namespace"]
        for label in kustomization.get("labels", []):
            if set(label) - {"pairs"}:
                raise ValueError(f"{folder}: only labels' pairs are rendered here: {label}")
            doc["metadata"].setdefault("labels", {}).update(label["pairs"])
        for image in kustomization.get("images", []):
            for container in containers(doc):
                if repository(container.get("image", "")) == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:" \
                                         f"{image['newTag']}"
    return docs


def repository(image: str) -> str:
    """An image reference without its tag (a registry's port is not a tag)."""
    name, _, tag = image.rpartition(":")
    return name if name and "/" not in tag else image


def load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def containers(doc: Doc) -> list[Doc]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [*spec.get("containers", []), *spec.get("initContainers", [])]


def patched(docs: list[Doc], change: Doc) -> list[Doc]:
    """`docs` with `change` merged into (or, `$patch: delete`, taken out of) the one
    resource of its kind and name; none such fails."""
    target = [d for d in docs if d["kind"] == change["kind"]
              and d["metadata"]["name"] == change["metadata"]["name"]]
    if len(target) != 1:
        raise ValueError(f"a patch of {change['kind']}/{change['metadata']['name']} matches "
                         f"{len(target)} resources")
    if change.get("$patch") == "delete":
        return [d for d in docs if d is not target[0]]
    merged = merge(target[0], change)
    return [merged if d is target[0] else d for d in docs]


def merge(base: Any, change: Any, field: str = "") -> Any:
    if isinstance(base, dict) and isinstance(change, dict):
        out = copy.deepcopy(base)
        for key, value in change.items():
            out[key] = merge(base[key], value, key) if key in base else copy.deepcopy(value)
        return out
    key = MERGE_KEYS.get(field)
    if isinstance(base, list) and isinstance(change, list) and key is not None:
        out_list = copy.deepcopy(base)
        for item in change:
            same = [n for n, b in enumerate(out_list) if b.get(key) == item.get(key)]
            if same:
                out_list[same[0]] = merge(out_list[same[0]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(change)
