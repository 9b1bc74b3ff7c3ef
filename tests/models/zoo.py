"""Small configurations of third-party models (Hugging Face transformers, timm, torchvision),
each wrapped so that forward(*inputs) returns a scalar training loss, with a fixed batch of 4.

build(name) -> Fixture(model, inputs): the model in train() mode (dropout probabilities 0,
BatchNorm in training mode) and an ordered {input name: tensor}. Both are deterministic:
torch.manual_seed(0) precedes the model's construction and the batch comes from its own seeded
generator. Needs torch, transformers, timm and torchvision (the export venv).
"""
import collections

import timm.models.convnext
import timm.models.resnet
import timm.models.vision_transformer
import torch
import torch.nn.functional as F
import torchvision.models as tvm
import transformers

BATCH = 4
SEQ = 16
VOCAB = 64
IMAGE = 32
CLASSES = 10

Fixture = collections.namedtuple("Fixture", "model inputs")


class TokenLoss(torch.nn.Module):
    """A Hugging Face language model that computes its own loss from `labels`.

    It passes an all-ones attention mask (no padding, the same loss): without a mask, transformers
    5 checks position_ids for packed sequences with torch.diff, which the TorchScript exporter
    cannot export (UnsupportedOperatorError: aten::diff, for GPT-2 and LLaMA)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        mask = torch.ones_like(input_ids)
        return self.model(input_ids=input_ids, attention_mask=mask, labels=labels).loss


class MaskedImageLoss(torch.nn.Module):
    """ViTMAEForPreTraining with its random masking driven by the `noise` input."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values, noise):
        return self.model(pixel_values=pixel_values, noise=noise).loss


class ClassifierLoss(torch.nn.Module):
    """An image classifier followed by cross-entropy against integer targets."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, target):
        return F.cross_entropy(self.model(x), target)


def _generator():
    return torch.Generator().manual_seed(1234)


def token_batch():
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=_generator())
    return collections.OrderedDict(input_ids=ids, labels=ids.clone())


def masked_token_batch(mask_token=4):
    """BERT-style batch: about 25% of positions (at least one per row) replaced by `mask_token`;
    labels hold the original token there and -100 elsewhere."""
    g = _generator()
    ids = torch.randint(5, VOCAB, (BATCH, SEQ), generator=g)
    masked = torch.rand(BATCH, SEQ, generator=g) < 0.25
    masked[torch.arange(BATCH), torch.randint(0, SEQ, (BATCH,), generator=g)] = True
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    return collections.OrderedDict(input_ids=torch.where(masked, mask_token, ids), labels=labels)


def image_batch(size=IMAGE):
    g = _generator()
    x = torch.randn(BATCH, 3, size, size, generator=g)
    target = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return collections.OrderedDict(x=x, target=target)


def hf_gpt2():
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, use_cache=False)
    return Fixture(TokenLoss(transformers.GPT2LMHeadModel(config)), token_batch())


def hf_bert():
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=0, use_cache=False)
    return Fixture(TokenLoss(transformers.BertForMaskedLM(config)), masked_token_batch())


def hf_llama():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
        attention_dropout=0.0, bos_token_id=1, eos_token_id=2, use_cache=False)
    return Fixture(TokenLoss(transformers.LlamaForCausalLM(config)), token_batch())


def hf_vitmae():
    config = transformers.ViTMAEConfig(
        image_size=IMAGE, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, decoder_hidden_size=32, decoder_num_hidden_layers=1,
        decoder_num_attention_heads=2, decoder_intermediate_size=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    g = _generator()
    patches = (IMAGE // config.patch_size) ** 2
    inputs = collections.OrderedDict(
        pixel_values=torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g),
        noise=torch.rand(BATCH, patches, generator=g))
    return Fixture(MaskedImageLoss(transformers.ViTMAEForPreTraining(config)), inputs)


def timm_vit():
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=IMAGE, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=CLASSES)
    return Fixture(ClassifierLoss(model), image_batch())


def timm_resnet():
    # (stem_width only applies to the "deep" stems; the default stem keeps its 64 channels)
    model = timm.models.resnet.ResNet(
        timm.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=CLASSES, channels=(8, 16, 32, 64))
    return Fixture(ClassifierLoss(model), image_batch())


def timm_convnext():
    model = timm.models.convnext.ConvNeXt(depths=(1, 1, 1, 1), dims=(8, 16, 32, 64), num_classes=CLASSES)
    return Fixture(ClassifierLoss(model), image_batch())


def tv_resnet18():
    # 64 x 64: layer4's BatchNorms then see 2 x 2 positions per sample; at 32 x 32 each normalizes
    # 4 values per channel, and rounding alone moves the first gradient norm by 1.6e-5.
    return Fixture(ClassifierLoss(tvm.resnet18(num_classes=CLASSES)), image_batch(64))


def tv_mobilenet_v3_small():
    model = tvm.mobilenet_v3_small(num_classes=CLASSES, width_mult=0.25, dropout=0.0)
    return Fixture(ClassifierLoss(model), image_batch())


def tv_convnext():
    cn = tvm.convnext.CNBlockConfig
    setting = [cn(8, 16, 1), cn(16, 32, 1), cn(32, 64, 1), cn(64, None, 1)]
    model = tvm.convnext.ConvNeXt(setting, stochastic_depth_prob=0.0, num_classes=CLASSES)
    return Fixture(ClassifierLoss(model), image_batch())


def tv_swin():
    model = tvm.SwinTransformer(
        patch_size=[2, 2], embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=[4, 4],
        stochastic_depth_prob=0.0, num_classes=CLASSES)
    return Fixture(ClassifierLoss(model), image_batch())


MODELS = collections.OrderedDict((f.__name__, f) for f in [
    hf_gpt2, hf_bert, hf_llama, hf_vitmae, timm_vit, timm_resnet, timm_convnext, tv_resnet18,
    tv_mobilenet_v3_small, tv_convnext, tv_swin])


def build(name):
    """The model `name` (a key of MODELS) in train() mode and its fixed batch."""
    torch.manual_seed(0)
    fixture = MODELS[name]()
    fixture.model.train()
    return fixture
