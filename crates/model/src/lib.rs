//! Model architectures: hyperparameters, tensor layouts, presets and quantization policy.
