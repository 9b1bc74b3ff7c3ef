# Colossal-AI's MAE example config, read by cpc as is (runtime/PyConfig.h: no Python is run).
from colossalai.amp import AMP_TYPE

# ViT Base
BATCH_SIZE = 32
TOTAL_BATCH_SIZE = 4096
LR = 1.5e-4
WEIGHT_DECAY = 0.05
NUM_EPOCHS = 800
WARMUP_EPOCHS = 40
fp16 = dict(mode=AMP_TYPE.TORCH)
gradient_accumulation = 2
clip_grad_norm = 1.0
parallel = dict(pipeline=1, tensor=dict(mode=None, size=1))
MODEL = "mae_vit_large_patch16"
NORM_PIX_LOSS = True
MASK_RATIO = 0.75
LOG_PATH = f"./output_{MODEL}"
