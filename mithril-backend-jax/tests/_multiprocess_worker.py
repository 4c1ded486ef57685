"""One process of the two-process JAX test (test_parallel.py): ``python _multiprocess_worker.py PORT ID OUT``.

Each process has 2 simulated CPU devices; ``jax.distributed.initialize`` (coordinator on 127.0.0.1, gloo
CPU collectives) joins them into one 4-device global mesh, on which a data-parallel training step runs.
Process 0 writes the outputs and gradients (global values) to OUT as JSON."""

import json
import sys

import jax

port, process_id, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id, initialization_timeout=120
)

import mithril as ml  # noqa: E402
import numpy as np  # noqa: E402
from mithril.models import MLP  # noqa: E402

model = MLP(input_size=16, hidden_sizes=[32], output_size=4)
backend = ml.JaxBackend(device_mesh=(4,))
pm = ml.compile(model, backend, shapes={"input": [8, 16]}, data_keys={"input"}, parallelism="data")
params = pm.randomize_params(seed=5)
rng = np.random.default_rng(0)  # the same global batch on every process
x = rng.standard_normal((8, 16)).astype(np.float32)
cot = rng.standard_normal((8, 4)).astype(np.float32)
outputs, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": cot})
found = {
    "devices": jax.device_count(),
    "local_devices": jax.local_device_count(),
    "output": backend.to_numpy(outputs["output"]).tolist(),
    "grads": {k: backend.to_numpy(v).tolist() for k, v in grads.items()},
}
if process_id == 0:
    with open(out, "w") as f:
        json.dump(found, f)
jax.distributed.shutdown()
