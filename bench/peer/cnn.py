"""The demo CNN shared by the PyTorch peers: the same architecture as dtrain's
`cnn` model (src/models/cnn.cpp)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    """conv(1->32,5,pad2)-ReLU-maxpool2 -> conv(32->64,5,pad2)-ReLU-maxpool2
    -> linear(3136->128)-ReLU -> linear(128->10)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)
