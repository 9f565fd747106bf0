#!/usr/bin/env bash
# deploy/: the DaemonSet manifest hangs together (selector and labels, every mount names a
# volume, the socket on the host path, probes through gllmctl status on that socket, the
# image's user), agrees with deploy/Dockerfile, and its gllmd.conf passes
# gllmd --check-config. yamllint runs in workflows.sh. Usage: deploy.sh SOURCE_DIR GLLMD
set -u
src=$1 gllmd=$2
python3 -c 'import yaml' 2>/dev/null || { echo "SKIPPED: python3-yaml not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$src/deploy/gllmd.yaml" "$src/deploy/Dockerfile" "$tmp/gllmd.conf" <<'PY' || exit 1
import re, sys, yaml
manifest, dockerfile, conf_out = sys.argv[1:]
docs = {d["kind"]: d for d in yaml.safe_load_all(open(manifest)) if d}
bad = []
def need(cond, what):
    if not cond:
        bad.append(what)

need(set(docs) == {"Namespace", "ConfigMap", "DaemonSet"}, f"kinds: {sorted(docs)}")
ds = docs["DaemonSet"]
ns = docs["Namespace"]["metadata"]["name"]
need(ds["metadata"]["namespace"] == ns and docs["ConfigMap"]["metadata"]["namespace"] == ns,
     "everything in one namespace")
spec = ds["spec"]["template"]["spec"]
labels = ds["spec"]["template"]["metadata"]["labels"]
need(all(labels.get(k) == v for k, v in ds["spec"]["selector"]["matchLabels"].items()),
     "selector matches the template's labels")
volumes = {v["name"]: v for v in spec["volumes"]}
containers = spec["containers"] + spec.get("initContainers", [])
for c in containers:
    for m in c.get("volumeMounts", []):
        need(m["name"] in volumes, f"{c['name']}: mount {m['name']} has no volume")
main = spec["containers"][0]
need(volumes["socket-dir"]["hostPath"]["path"] == "/run/gllm", "socket directory on the host's /run/gllm")
mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
args = main["args"]
sock = args[args.index("--socket") + 1]
need(sock.startswith(mounts["socket-dir"] + "/"), f"socket {sock} is on the host path mount")
conf = args[args.index("--config") + 1]
need(conf.rsplit("/", 1)[0] == mounts["config"], f"config {conf} is in the ConfigMap mount")
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    cmd = main.get(probe, {}).get("exec", {}).get("command", [])
    need(cmd[:1] == ["gllmctl"] and cmd[-1] == "status" and sock in cmd,
         f"{probe} runs gllmctl status on {sock}: {cmd}")
need(ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 60,
     "grace period longer than the default drain_timeout_s (60)")
need(all(c["image"] == main["image"] for c in containers), "one image")
need("nvidia.com/gpu" not in str(main.get("resources", {})),
     "no nvidia.com/gpu limit (it would take the GPUs from the serving pods)")
need(main["securityContext"].get("readOnlyRootFilesystem") is True, "read-only root")

text = open(dockerfile).read()
user = re.findall(r"^USER (\d+):(\d+)$", text, re.M)
need(user and int(user[-1][0]) == spec["securityContext"]["runAsUser"]
     and int(user[-1][1]) == spec["securityContext"]["runAsGroup"],
     f"the image's USER {user} is the pod's runAsUser/runAsGroup")
need(f'"{sock}"' in text, f"the image's default socket is {sock}")
need("/tmp/packages/gllmd_" in text, "the image installs the gllmd package")

open(conf_out, "w").write(docs["ConfigMap"]["data"]["gllmd.conf"])
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
"$gllmd" --check-config --config "$tmp/gllmd.conf" >/dev/null ||
  { echo "FAIL: the ConfigMap's gllmd.conf does not pass gllmd --check-config"; exit 1; }
echo "deploy/ manifest and Dockerfile agree; its gllmd.conf is valid"
