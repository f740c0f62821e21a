"""Fixtures of the data tests: ir_datasets offline, and datasets registered for one test."""

import socket
import uuid

import pytest


@pytest.fixture
def network(monkeypatch):
    """Block the network: name lookups and connects raise (as offline here) and are recorded; no proxy is named and
    ir_datasets tries each mirror once (no retry loop)."""
    attempts = []

    def no_lookup(host, *args, **kwargs):
        attempts.append(host)
        raise socket.gaierror(socket.EAI_NONAME, f"network disabled in tests (looking up {host})")

    def no_connect(self, address):
        attempts.append(address)
        raise OSError(f"network disabled in tests (connecting to {address})")

    monkeypatch.setattr(socket, "getaddrinfo", no_lookup)
    monkeypatch.setattr(socket.socket, "connect", no_connect)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IR_DATASETS_DL_TRIES", "1")
    return attempts


@pytest.fixture
def register():
    """Register datasets under unique ids and drop them from ir_datasets' global registry afterwards."""
    import ir_datasets

    added = []

    def _register(dataset, stem="tiny"):
        dataset_id = f"efficient-rankers-test/{stem}-{uuid.uuid4().hex[:8]}"
        ir_datasets.registry.register(dataset_id, dataset)
        added.append(dataset_id)
        return dataset_id

    yield _register
    for dataset_id in added:
        # The Registry has no public unregister; its dict is the only way to undo register().
        ir_datasets.registry._registered.pop(dataset_id, None)
