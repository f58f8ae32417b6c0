#pragma once
#include <cuda_runtime.h>

#include "backend/ctl.h"

// Device side of the planted controls: a per-file constant set from g_active_control before each launch; in
// production builds TF_DCTL is false and no planted branch is compiled.
#if defined(TF_CTL) && TF_CTL
static __constant__ int d_ctl;
#define TF_DCTL(n) (d_ctl == (n))
inline void upload_control() { cudaMemcpyToSymbol(d_ctl, &::tf::g_active_control, sizeof(int)); }
#else
#define TF_DCTL(n) false
inline void upload_control() {}
#endif
