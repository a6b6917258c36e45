# The training image the rendered manifests run: CUDA PyTorch, the training entrypoint, the HyperPod
# elastic agent (`hyperpodrun`), a C compiler and the EFA stack. Build and push, then pass it as
# cluster.image (docs/container.md: Build the image):
#
#   docker build -t <account>.dkr.ecr.<region>.amazonaws.com/elastic-train:1 .
#
# What a GPU pod needs beyond torch, each checked by the trainer's self-check (training/doctor.py)
# before it trains:
# - a C compiler: Triton builds its kernel launchers with one at run time (compiled decoder layers,
#   flex attention's compiled mask builder), so the base is a CUDA *devel* image;
# - libfabric and aws-ofi-nccl (the EFA installer): without them NCCL talks TCP sockets on p4d/p5/p5en
#   although the pods request EFA devices.
# BASE_IMAGE may instead be an AWS PyTorch training DLC (compiler and EFA included; then drop the two
# system steps). hyperpod-elastic-agent 1.1.3 requires torch < 2.12 (and pip < 25.3), so the image pins
# torch 2.11 (the repository's requirements.txt pins the CPU build of 2.13 for local runs and CI).
# One CUDA for torch and vLLM: vLLM 0.26.0's kernels link the CUDA 13 runtime (libcudart.so.13), so torch
# (and the torchvision and torchaudio vLLM requires) come from the cu130 index, on a CUDA 13 base.
ARG BASE_IMAGE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu22.04
FROM ${BASE_IMAGE}

ARG EFA_INSTALLER_VERSION=1.43.2
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HOME=/checkpoints/.hf \
    PATH=/opt/venv/bin:/opt/amazon/efa/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH}

# Python 3.11 and the C compiler Triton calls at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc g++ make curl ca-certificates libhwloc-dev \
        python3.11 python3.11-dev python3.11-venv \
 && python3.11 -m venv /opt/venv \
 && rm -rf /var/lib/apt/lists/*

# EFA user space: libfabric and the aws-ofi-nccl plugin NCCL loads (no kernel module in a container).
RUN cd /tmp \
 && curl -fsSLO https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz \
 && tar -xf aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz \
 && cd aws-efa-installer && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify \
 && ldconfig && cd / && rm -rf /tmp/aws-efa-installer* /var/lib/apt/lists/*

# openai and boto3 are GRPO's LLM judges' clients (OpenAI-compatible servers; Bedrock's Converse API).
# liger-kernel is not the trainer's (its loss is training/model/loss.py): bench/gpu_smoke.py compares the two.
# flash-linear-attention (Triton, no build) is the chunked kernel transformers runs for Qwen 3.5's Gated
# DeltaNet layers, and the one whose memory the dry run traces; without it they fall back to a slow torch loop.
# Nemotron-H's Mamba-2 layers have no such kernel here (mamba_ssm and causal_conv1d need a CUDA build):
# they run transformers' reference PyTorch path, the one the dry run traces for them.
RUN pip install "pip<25.3" \
 && pip install torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0 --index-url https://download.pytorch.org/whl/cu130 \
 && pip install hyperpod-elastic-agent==1.1.3 transformers==5.23.0 datasets==5.2.0 torchdata==0.11.0 \
        pyyaml safetensors tensorboard liger-kernel==0.6.4 peft==0.21.2 mlflow-skinny==3.17.2 sagemaker-mlflow==0.5.0 \
        flash-linear-attention==0.6.0 math-verify==0.9.0 matplotlib==3.11.2 openai==3.57.0 boto3==1.44.8 \
        s3torchconnector[dcp]==1.5.0 lm-eval==0.4.13

# vLLM for GRPO's rollouts on GPUs: each release pins one torch, and 0.26.0 is the newest whose wheel
# requires the image's torch==2.11.0 (0.27-0.30 require 2.13, 0.33 requires 2.14; training/rl/vllm_builds.py).
# The self-check refuses a vLLM built for another torch or whose kernels do not load beside it, and
# reports whether batch invariance is on.
RUN pip install vllm==0.26.0

# The container contract (docs/container.md): the working directory holds the `training` package, so
# `hyperpodrun ... -m training --config-dir=/config` (HyperPod), `torchrun -m training --config-dir=/config`
# (Kubeflow) and `python -m training.doctor` (the self-check by hand) resolve it.
WORKDIR /app
COPY training/ /app/training/
COPY data/ /app/data/

# No ENTRYPOINT: the manifests set the command. hyperpodrun must be PID 1 (exec form) so it receives
# the pod's SIGTERM; it forwards the operator's graceful stop to the trainer as SIGUSR1.
