// A CPU-only libtorch: no accelerator backend.
#include "backend.h"

const gpu_scope::Backend* gpu_scope::backend() { return nullptr; }
