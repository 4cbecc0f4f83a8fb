//! Placeholder until the kernels land (lead's stub; replace freely).
