# The training image the rendered manifests run: CUDA PyTorch, the training entrypoint, and the
# HyperPod elastic agent (`hyperpodrun`). Build and push, then pass it as cluster.image:
#
#   docker build -t <account>.dkr.ecr.<region>.amazonaws.com/elastic-train:1 .
#
# hyperpod-elastic-agent 1.1.3 requires torch < 2.12 (and pip < 25.3), so the image pins torch 2.11
# (the repository's requirements.txt pins the CPU build of 2.13 for local runs and CI). For EFA on
# p4d/p5 instances, build FROM an AWS Deep Learning Container that ships aws-ofi-nccl instead.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HOME=/checkpoints/.hf

RUN pip install "pip<25.3" \
 && pip install torch==2.11.0 --index-url https://download.pytorch.org/whl/cu128 \
 && pip install hyperpod-elastic-agent==1.1.3 transformers==5.23.0 datasets==5.2.0 torchdata==0.11.0 \
        pyyaml safetensors tensorboard liger-kernel==0.6.4 peft==0.21.2 mlflow-skinny==3.17.2 sagemaker-mlflow==0.5.0

# The container contract (see README, "Training container"): the working directory holds the
# `training` package, so `hyperpodrun ... -m training --config-dir=/config` (HyperPod) and
# `torchrun -m training --config-dir=/config` (Kubeflow) resolve it.
WORKDIR /app
COPY training/ /app/training/
COPY data/ /app/data/

# No ENTRYPOINT: the manifests set the command. hyperpodrun must be PID 1 (exec form) so it receives
# the pod's SIGTERM; it forwards the operator's graceful stop to the trainer as SIGUSR1.
