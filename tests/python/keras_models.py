"""The Keras programs the training-parity tests and the benchmarks run.

Plain Keras 3, nothing tfwasm-specific: the point is that a user's program
runs unchanged. Used as a script (one training run, results as JSON on the
last line of stdout) and as a module (the benchmarks build the same models).

    python keras_models.py --model mlp|cnn|separable|dilated|upsample|volume|augment|rnn|transformer|embedding|masked|sequence [--epochs 3]
                           [--jit false|default] [--optimizer adam|sgd|rmsprop|...]

Placement is left to TensorFlow, which puts every op with a WASM kernel on
the WASM device. The CPU reference run uses a policy with
``[device] count = 0``, so the plugin loads but lists no device.
(``tf.config.set_visible_devices`` does not hide a PluggableDevice in
TensorFlow 2.21.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SEED = 1234
SAMPLES = 512
BATCH = 32
#: The transformer model's vocabulary.
TOKENS = 200
#: The embedding model's vocabulary and sequence length.
VOCAB, SEQUENCE = 50, 10


def data(model: str):
    import numpy as np

    rng = np.random.default_rng(SEED)
    if model == "mlp":
        x = rng.standard_normal((SAMPLES, 20)).astype(np.float32)
        w = rng.standard_normal((20, 10)).astype(np.float32)
        y = np.argmax(x @ w + 0.5 * rng.standard_normal((SAMPLES, 10)), axis=1).astype(np.int64)
    elif model in ("transformer", "sequence"):
        # Token sequences; the class is the most frequent of five token bands.
        x = rng.integers(0, TOKENS, (SAMPLES, 16)).astype(np.int32)
        y = np.array([np.bincount(row * 5 // TOKENS, minlength=5).argmax() for row in x], np.int64)
    elif model in ("embedding", "masked"):
        # Token sequences (0 among them: padding to the masked model),
        # labelled by whether low tokens outnumber high ones.
        x = rng.integers(0, VOCAB, size=(SAMPLES, SEQUENCE)).astype(np.int64)
        y = ((x < VOCAB // 2).sum(axis=1) > SEQUENCE // 2).astype(np.float32)
    elif model == "volume":
        # Small volumes, labelled by the mean of a central block.
        x = rng.random((SAMPLES, 8, 12, 12, 1)).astype(np.float32)
        y = (x[:, 2:6, 3:9, 3:9, 0].mean(axis=(1, 2, 3)) * 10).astype(np.int64) % 10
    elif model == "rnn":
        x = rng.standard_normal((SAMPLES, 12, 4)).astype(np.float32)
        y = (np.cumsum(x[:, :, 0], axis=1)[:, -1] > 0).astype(np.int64) + 2 * (x[:, -1, 1] > 0)
    else:
        x = rng.random((SAMPLES, 28, 28, 1)).astype(np.float32)
        y = (x[:, 8:20, 8:20, 0].mean(axis=(1, 2)) * 10).astype(np.int64) % 10
    return x, y


def build(model: str):
    import keras
    from keras import layers

    if model == "mlp":
        net = keras.Sequential([
            keras.Input((20,)),
            layers.Dense(64, activation="relu"),
            layers.Dense(64, activation="relu"),
            layers.Dense(10),
        ])
    elif model == "transformer":
        # One encoder block: an embedding (its gradient is a sparse
        # UnsortedSegmentSum), multi-head attention (einsums), layer norms
        # and an exact-GELU feed-forward layer (Erfc).
        inputs = keras.Input((16,), dtype="int32")
        h = layers.Embedding(TOKENS, 32)(inputs)
        h = layers.LayerNormalization()(h + layers.MultiHeadAttention(num_heads=4, key_dim=8)(h, h))
        f = layers.Dense(32)(layers.Dense(64, activation="gelu")(h))
        h = layers.LayerNormalization()(h + layers.Dropout(0.1)(f))
        net = keras.Model(inputs, layers.Dense(5)(layers.GlobalAveragePooling1D()(h)))
    elif model == "sequence":
        # An LSTM fed by an embedding, then a 1-D convolution: the LSTM's
        # gradient loop sums TensorLists (a variant AddN, CPU only) and
        # splits its gates (Split, StridedSliceGrad).
        inputs = keras.Input((16,), dtype="int32")
        h = layers.LSTM(16, return_sequences=True)(layers.Embedding(TOKENS, 8)(inputs))
        h = layers.GlobalAveragePooling1D()(layers.Conv1D(8, 3, padding="same", activation="relu")(h))
        net = keras.Model(inputs, layers.Dense(5)(h))
    elif model == "embedding":
        # Adam densifies the Embedding's sparse gradient (UnsortedSegmentSum),
        # plain SGD, RMSprop, Adagrad and Adadelta scatter it into the table
        # (ResourceScatterSub/Add, see --optimizer); `ops.take` wraps
        # negative ids (int SelectV2); the sigmoid output's binary
        # cross-entropy is computed from its logits (Select).
        net = keras.Sequential([
            keras.Input((SEQUENCE,), dtype="int64"),
            layers.Embedding(VOCAB, 8),
            layers.GlobalAveragePooling1D(),
            layers.Dense(1, activation="sigmoid"),
        ])
    elif model == "rnn":
        # A recurrence: TensorFlow runs it as a while loop whose state it
        # copies within the device between steps.
        net = keras.Sequential([keras.Input((12, 4)), layers.SimpleRNN(16), layers.Dense(10)])
    elif model == "masked":
        # A padded sequence: Embedding(mask_zero=True) hands the recurrent
        # layers a bool mask, which both directions of a Bidirectional GRU
        # transpose, reverse, tile and concatenate (bool data movement).
        net = keras.Sequential([
            keras.Input((SEQUENCE,), dtype="int64"),
            layers.Embedding(VOCAB, 8, mask_zero=True),
            layers.Bidirectional(layers.GRU(8)),
            layers.Dense(1, activation="sigmoid"),
        ])
    elif model == "dilated":
        # Dilated convolutions, which TensorFlow runs between
        # SpaceToBatchND and BatchToSpaceND: a 2-D one, then a causal 1-D
        # one over the rows.
        net = keras.Sequential([
            keras.Input((28, 28, 1)),
            layers.Conv2D(8, 3, dilation_rate=2, activation="relu", padding="same"),
            layers.MaxPooling2D(),
            layers.Reshape((14, 14 * 8)),
            layers.Conv1D(16, 3, dilation_rate=3, activation="relu", padding="causal"),
            layers.GlobalAveragePooling1D(),
            layers.Dense(10),
        ])
    elif model == "upsample":
        # Bilinear resizing (ResizeBilinear and its gradient), as a
        # segmentation decoder upsamples: UpSampling2D and Resizing both
        # call tf.image.resize.
        net = keras.Sequential([
            keras.Input((28, 28, 1)),
            layers.Conv2D(8, 3, activation="relu", padding="same"),
            layers.MaxPooling2D(),
            layers.UpSampling2D(interpolation="bilinear"),
            layers.Resizing(20, 20),
            layers.Conv2D(8, 3, activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(10),
        ])
    elif model == "volume":
        # 3-D convolutions and pooling, as volumetric (medical, video)
        # models use them: Conv3DTranspose runs Conv3DBackpropInputV2 forward
        # and Conv3D in its gradient.
        net = keras.Sequential([
            keras.Input((8, 12, 12, 1)),
            layers.Conv3D(4, 3, activation="relu", padding="same"),
            layers.MaxPooling3D(),
            layers.Conv3DTranspose(4, 2, strides=2, activation="relu"),
            layers.Conv3D(8, 3, activation="relu"),
            layers.AveragePooling3D(2),
            layers.Flatten(),
            layers.Dense(10),
        ])
    elif model == "augment":
        # Image augmentation inside the model, as Keras recommends for
        # accelerators: flips, rotations, zooms and translations (a
        # projective transform each, their matrices from sines and cosines)
        # and a nearest-neighbour resize. Both runs draw the same random
        # transforms from the same seeds.
        net = keras.Sequential([
            keras.Input((28, 28, 1)),
            layers.RandomFlip("horizontal"),
            layers.RandomRotation(0.1),
            layers.RandomZoom(0.1),
            layers.RandomTranslation(0.1, 0.1),
            layers.Resizing(24, 24, interpolation="nearest"),
            layers.Conv2D(8, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(10),
        ])
    elif model == "separable":
        # Depthwise convolutions (DepthwiseConv2dNative and both backprops):
        # one multiplier per channel, then 2 per channel with a stride.
        net = keras.Sequential([
            keras.Input((28, 28, 1)),
            layers.Conv2D(8, 3, activation="relu", padding="same"),
            layers.DepthwiseConv2D(3, activation="relu"),
            layers.SeparableConv2D(16, 3, strides=2, depth_multiplier=2, activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(10),
        ])
    else:
        net = keras.Sequential([
            keras.Input((28, 28, 1)),
            layers.Conv2D(8, 3, activation="relu", padding="same"),
            layers.MaxPooling2D(),
            layers.Conv2D(16, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dropout(0.25),
            layers.Dense(10),
        ])
    return net


def compile_model(net, jit_compile, model="mlp", optimizer="adam"):
    import keras

    kwargs = {} if jit_compile == "default" else {"jit_compile": jit_compile}
    metrics = ["accuracy"]
    if model in ("embedding", "masked"):
        loss = "binary_crossentropy"
        # AUC sums its confusion counts over thresholds (Cumsum).
        metrics.append(keras.metrics.AUC(name="auc"))
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if model == "upsample":
        # Top-k accuracy ranks each row's target (InTopKV2).
        metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=3, name="top3"))
    net.compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["mlp", "cnn", "separable", "dilated", "upsample", "volume", "augment", "rnn", "transformer", "embedding", "masked", "sequence"], required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--jit", choices=["false", "default"], default="false")
    parser.add_argument("--optimizer", default="adam", help="a Keras optimizer name")
    parser.add_argument("--dtype-policy", default="float32", help="Keras' global dtype policy, e.g. mixed_float16")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import keras

    keras.mixed_precision.set_global_policy(args.dtype_policy)
    keras.utils.set_random_seed(SEED)
    x, y = data(args.model)
    net = build(args.model)
    compile_model(net, False if args.jit == "false" else "default", args.model, args.optimizer)
    history = net.fit(x, y, batch_size=BATCH, epochs=args.epochs, shuffle=False, verbose=0)
    weights_device = net.trainable_variables[0].value.device
    result = {
        "loss": [float(v) for v in history.history["loss"]],
        "accuracy": [float(v) for v in history.history["accuracy"]],
        "eval_loss": float(net.evaluate(x, y, batch_size=BATCH, verbose=0)[0]),
        "predict_sum": float(net.predict(x[:64], batch_size=BATCH, verbose=0).sum()),
        "weights_device": weights_device,
        # What the first layer with weights computes in (the policy's type).
        "compute_dtype": next(layer.compute_dtype for layer in net.layers if layer.trainable_weights),
        "devices": sorted({d.device_type for d in tf.config.list_logical_devices()}),
    }
    sys.stdout.flush()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
