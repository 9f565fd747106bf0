#!/bin/bash
# Throwaway: launch knobs on this host.
K=build-ab/knobs/knobs
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed 's/^0000//')
cat /sys/bus/pci/devices/0000${bus#0000}/local_cpulist 2>/dev/null || ls /sys/bus/pci/devices | head
lscpu | grep -E "Model name|MHz|NUMA|^CPU\(s\)"
local=$(cut -d, -f1 /sys/bus/pci/devices/0000${bus#0000}/local_cpulist 2>/dev/null | cut -d- -f1)
$K 1
$K 4
$K 1 ${local:-0}
$K 1 $(( $(nproc) - 1 ))
CUDA_MODULE_LOADING=EAGER $K 1
