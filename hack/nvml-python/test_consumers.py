"""NVML's Python users against fakegpu's library: NVIDIA's nvidia-ml-py (pynvml, which
PyTorch's torch.cuda memory and utilization helpers call), gpustat and nvitop, in a GPU pod's
container as the node agent sets one up (the library found by its soname, the node's document
named by FAKEGPU_NVML_TOPOLOGY, the pod's name in HOSTNAME); and NVIDIA's CUDA runtime against
fakegpu's libcuda, as a driver root gives it. Run by hack/nvml-python.sh with
FAKEGPU_NVML_LIBRARY naming the built library (fakegpu's libcuda.so is built beside it)."""

import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
H100 = REPO / "nvml/tests/documents/h100.yml"
MIB = 1024 * 1024

# GPU 0 held by pod train-0 at a steady 10 % with 1000 MiB, GPU 1 by another pod.
HELD = """  index: 0
  status:
    allocatedBy: {namespace: ml, pod: train-0, container: main}
    podGpuUsageStatus:
      uid-train: {utilization: {min: 10, max: 10}, fbUsed: 1000, useKnativeUtilization: false}
"""
OTHER = """  index: 1
  status:
    allocatedBy: {namespace: ml, pod: serve-0, container: main}
    podGpuUsageStatus:
      uid-serve: {utilization: {min: 50, max: 50}, fbUsed: 2000, useKnativeUtilization: false}
"""

CHILD = """
import json, pynvml
pynvml.nvmlInit()
out = {"driver": pynvml.nvmlSystemGetDriverVersion(), "gpus": []}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    memory = pynvml.nvmlDeviceGetMemoryInfo(h)
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    try:
        samples = [(s.pid, s.smUtil, s.memUtil) for s in pynvml.nvmlDeviceGetProcessUtilization(h, 0)]
    except pynvml.NVMLError_NotFound:
        samples = []
    out["gpus"].append({
        "name": pynvml.nvmlDeviceGetName(h),
        "uuid": pynvml.nvmlDeviceGetUUID(h),
        "used": memory.used,
        "utilization": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
        "temperature": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "processes": [(p.pid, p.usedGpuMemory, pynvml.nvmlSystemGetProcessName(p.pid)) for p in processes],
        "samples": samples,
    })
pynvml.nvmlShutdown()
print(json.dumps(out))
"""

CUDA_RUNTIME = """
import ctypes, json, pathlib, nvidia.cuda_runtime
lib = pathlib.Path(nvidia.cuda_runtime.__path__[0]) / "lib" / "libcudart.so.12"
rt = ctypes.CDLL(str(lib))
rt.cudaGetErrorString.restype = ctypes.c_char_p
version, count = ctypes.c_int(-1), ctypes.c_int(-1)
driver = rt.cudaDriverGetVersion(ctypes.byref(version))
devices = rt.cudaGetDeviceCount(ctypes.byref(count))
print(json.dumps([driver, version.value, devices, rt.cudaGetErrorString(devices).decode()]))
"""


class Consumers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        library = os.environ.get("FAKEGPU_NVML_LIBRARY")
        if not library:
            raise unittest.SkipTest("FAKEGPU_NVML_LIBRARY must name the built library")
        cls.scratch = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.scratch.name)
        # The soname the bindings dlopen, on the loader's path, as in a container.
        (root / "libnvidia-ml.so.1").symlink_to(pathlib.Path(library).resolve())
        cuda = pathlib.Path(library).resolve().with_name("libcuda.so")
        if not cuda.is_file():
            raise AssertionError(f"{cuda} is not built: cargo build -p fakegpu-cuda")
        (root / "libcuda.so.1").symlink_to(cuda)
        document = H100.read_text().replace("  index: 0\n", HELD, 1).replace("  index: 1\n", OTHER, 1)
        (root / "topology.yml").write_text(document)
        cls.env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(root),
            "FAKEGPU_NVML_TOPOLOGY": str(root / "topology.yml"),
            "HOSTNAME": "train-0",
        }
        cls.env.pop("NVIDIA_VISIBLE_DEVICES", None)
        cls.env.pop("POD_UUID", None)
        with open("/proc/1/cmdline", "rb") as f:
            cls.pid1 = f.read().split(b"\0")[0].decode()

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def run_python(self, *args):
        done = subprocess.run([sys.executable, *args], env=self.env, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, f"{args}: {done.stdout}{done.stderr}")
        return done.stdout

    def test_pynvml_sees_the_gpus_and_the_pods_own_process(self):
        import json

        seen = json.loads(self.run_python("-c", CHILD))
        self.assertEqual(seen["driver"], "550.163.01")
        self.assertEqual([g["name"] for g in seen["gpus"]], ["NVIDIA H100 80GB HBM3"] * 2)
        held, other = seen["gpus"]
        self.assertEqual((held["used"], held["utilization"], held["temperature"]), (1000 * MIB, 10, 34))
        self.assertEqual(held["processes"], [[1, 1000 * MIB, self.pid1]])
        self.assertEqual(held["samples"], [[1, 10, 4]])
        # Another pod's GPU: its memory and load show, its process (another PID namespace) does not.
        self.assertEqual((other["used"], other["utilization"]), (2000 * MIB, 50))
        self.assertEqual((other["processes"], other["samples"]), ([], []))

    def test_gpustat_lists_the_pods_process(self):
        import json

        report = json.loads(self.run_python("-m", "gpustat", "--json"))
        held, other = report["gpus"]
        self.assertEqual((held["memory.used"], held["utilization.gpu"], held["temperature.gpu"]), (1000, 10, 34))
        self.assertEqual([(p["pid"], p["gpu_memory_usage"]) for p in held["processes"]], [(1, 1000)])
        self.assertEqual(other["processes"], [])

    def test_nvitop_shows_the_process_and_its_load(self):
        out = self.run_python("-m", "nvitop", "--once")
        # The GPU rows (temperature from the versioned query) and the process row with %SM and %GMBW.
        self.assertRegex(out, r"N/A\s+34C\s+P0\s+133W / 700W\s+\S\s+1000MiB / 79\.65GiB\s+\S\s+10%")
        row = [line for line in out.splitlines() if " C " in line and "1000MiB" in line]
        self.assertEqual(len(row), 1, out)
        self.assertRegex(row[0], r"\s0\s+1 C\s+\S+\s+1000MiB\s+10\s+4\s")


    def test_the_cuda_runtime_finds_the_driver_and_no_device(self):
        import json

        # NVIDIA's runtime loads libcuda.so.1: the driver's CUDA version is the document's
        # (12.4), and it reports no device to run kernels on, rather than a missing or
        # insufficient driver.
        driver, version, devices, message = json.loads(self.run_python("-c", CUDA_RUNTIME))
        self.assertEqual((driver, version), (0, 12040))
        self.assertEqual((devices, message), (100, "no CUDA-capable device is detected"))


if __name__ == "__main__":
    unittest.main()
