# Helpers for the PyTorch peers of tests/train (torch 1.13 and later).
import torch


def load(path):
    # dtrain's files are plain dicts of tensors; weights_only exists from 1.13
    # and refuses torch::pickle_save's type tags, so it is turned off.
    try:
        return torch.load(path, weights_only=False)
    except TypeError:
        return torch.load(path)


def set_weight_decay(model, weight_decay, norm_weight_decay=None, custom_keys_weight_decay=None):
    """torchvision's references/classification/utils.py set_weight_decay (0.14)."""
    norm_classes = (
        torch.nn.modules.batchnorm._BatchNorm,
        torch.nn.LayerNorm,
        torch.nn.GroupNorm,
        torch.nn.modules.instancenorm._InstanceNorm,
        torch.nn.LocalResponseNorm,
    )
    params = {"other": [], "norm": []}
    params_weight_decay = {"other": weight_decay, "norm": norm_weight_decay}
    custom_keys = []
    if custom_keys_weight_decay is not None:
        for key, wd in custom_keys_weight_decay:
            params[key] = []
            params_weight_decay[key] = wd
            custom_keys.append(key)

    def _add_params(module, prefix=""):
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            is_custom_key = False
            for key in custom_keys:
                target_name = f"{prefix}.{name}" if prefix != "" and "." in key else name
                if key == target_name:
                    params[key].append(p)
                    is_custom_key = True
                    break
            if not is_custom_key:
                if norm_weight_decay is not None and isinstance(module, norm_classes):
                    params["norm"].append(p)
                else:
                    params["other"].append(p)
        for child_name, child_module in module.named_children():
            child_prefix = f"{prefix}.{child_name}" if prefix != "" else child_name
            _add_params(child_module, prefix=child_prefix)

    _add_params(model)
    groups = []
    for key in params:
        if len(params[key]) > 0:
            groups.append({"params": params[key], "weight_decay": params_weight_decay[key]})
    return groups
