"""User-facing composite blocks, built from primitives."""

from .attention import MultiHeadAttention
from .classic import KernelizedSVM, LinearSVM, LogisticRegression, PolynomialKernel, PolynomialRegression, RBFKernel
from .conv import AvgPool2D, Conv1d, Conv2d, Convolution1D, Convolution2D, Flatten, MaxPool2D
from .embedding import Embedding
from .gaussian_process import GaussProcessRegressionCore, GPRLoss
from .lambda_ import Lambda
from .linear import MLP, ElementWiseAffine, Layer, Linear
from .losses import AbsoluteError, BinaryCrossEntropy, CrossEntropy, SquaredError
from .manifold import MDS, TSNE, DistanceEncoder, MDSCore, TSNECore, tsne_joint_probabilities
from .margin_losses import HingeLoss, KLDivergence, QuadHingeLoss, QuantileLoss
from .metrics import AUC, F1, Accuracy, Precision, Recall
from .norm import BatchNorm2D, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from .recurrent import (
    Cell,
    EncoderDecoder,
    EncoderDecoderInference,
    LSTMCell,
    ManyToOne,
    OneToMany,
    OneToManyInference,
    RNNCell,
)
from .regularization import Dropout
from .regularizers import QuadraticFormRegularizer
from .sequence import (
    ManyToMany,
    TorchEncoderDecoder,
    TorchEncoderDecoderInference,
    TorchLSTMCell,
    TorchManyToOne,
    TorchOneToMany,
    TorchRNNCell,
)
from .tensor_ops import *  # noqa: F403
from .tensor_ops import __all__ as _tensor_ops_all

__all__ = [
    "AbsoluteError",
    "AvgPool2D",
    "BatchNorm2D",
    "BatchNorm2d",
    "BinaryCrossEntropy",
    "Conv1d",
    "Conv2d",
    "Convolution1D",
    "Convolution2D",
    "CrossEntropy",
    "Dropout",
    "Embedding",
    "Flatten",
    "GroupNorm",
    "Lambda",
    "LayerNorm",
    "Linear",
    "Layer",
    "ElementWiseAffine",
    "MaxPool2D",
    "MLP",
    "MultiHeadAttention",
    "RMSNorm",
    "SquaredError",
    "HingeLoss",
    "QuadHingeLoss",
    "QuantileLoss",
    "KLDivergence",
    "QuadraticFormRegularizer",
    *_tensor_ops_all,
    "Cell",
    "RNNCell",
    "LSTMCell",
    "ManyToOne",
    "OneToMany",
    "OneToManyInference",
    "EncoderDecoder",
    "EncoderDecoderInference",
    "TorchRNNCell",
    "TorchLSTMCell",
    "TorchManyToOne",
    "ManyToMany",
    "TorchOneToMany",
    "TorchEncoderDecoder",
    "TorchEncoderDecoderInference",
    "LogisticRegression",
    "PolynomialRegression",
    "LinearSVM",
    "KernelizedSVM",
    "RBFKernel",
    "PolynomialKernel",
    "Accuracy",
    "Precision",
    "Recall",
    "F1",
    "AUC",
    "MDS",
    "TSNE",
    "MDSCore",
    "TSNECore",
    "DistanceEncoder",
    "tsne_joint_probabilities",
    "GaussProcessRegressionCore",
    "GPRLoss",
]
