#!/usr/bin/env python3
"""Extracts, from the official Run:ai control-plane OpenAPI document, the operations the mock serves and every
schema they reference, into openapi-subset.json (embedded by the mock for request validation).

Usage: python3 extract.py /path/to/openapi.json
"""
import json
import sys

OPS = [
    ("/api/v1/token", "post"),
    ("/api/v1/workloads/trainings", "post"),
    ("/api/v1/workloads/distributed", "post"),
    ("/api/v1/workloads/trainings/{workloadId}", "get"),
    ("/api/v1/workloads/trainings/{workloadId}", "delete"),
    ("/api/v1/workloads/distributed/{workloadId}", "get"),
    ("/api/v1/workloads/distributed/{workloadId}", "delete"),
    ("/api/v1/workloads/{workloadId}", "get"),
    ("/api/v1/workloads/{workloadId}/events", "get"),
    ("/api/v1/workloads/{workloadId}/pods", "get"),
    ("/api/v1/workloads", "get"),
    ("/api/v1/org-unit/projects", "get"),
    ("/api/v1/clusters", "get"),
]


def main():
    doc = json.load(open(sys.argv[1]))
    schemas = doc["components"]["schemas"]
    keep, paths = {}, {}

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k == "$ref" and v.startswith("#/components/schemas/"):
                    name = v.rsplit("/", 1)[1]
                    if name not in keep:
                        keep[name] = schemas[name]
                        walk(schemas[name])
                else:
                    walk(v)
        elif isinstance(o, list):
            for x in o:
                walk(x)

    for path, method in OPS:
        op = doc["paths"][path][method]
        paths.setdefault(path, {})[method] = op
        walk(op)
    out = {"openapi": doc["openapi"], "info": doc["info"], "paths": paths, "components": {"schemas": keep}}
    json.dump(out, open("openapi-subset.json", "w"), indent=0, sort_keys=True)
    print(f"{len(paths)} paths, {len(keep)} schemas")


if __name__ == "__main__":
    main()
