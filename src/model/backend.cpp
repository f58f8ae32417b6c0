#include "model/backend.h"

#include "base/error.h"
#if TF_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_gemv.h"
#endif

namespace tf {

bool cuda_compiled() { return TF_HAVE_CUDA != 0; }

BackendChoice choose_backend(const std::string& want) {
  if (want != "auto" && want != "cpu" && want != "cuda") fail("--backend '{}' is not one of auto, cpu, cuda", want);
  if (want == "cpu") return {"cpu", "asked for", 0, 0};
  std::string why;
#if TF_HAVE_CUDA
  if (cuda::device_count() == 0) {
    why = "no CUDA device is visible";
  } else {
    cuda::DeviceInfo d = cuda::device_info(0);
    if (d.major < 9) {
      why = fmt::format("{} has compute capability {}.{}; this build runs 9.0 or newer", d.name, d.major, d.minor);
    } else {
      return {"cuda",
              fmt::format("{} (compute {}.{}, {:.1f} GiB free of {:.1f} GiB)", d.name, d.major, d.minor,
                          double(d.free_bytes) / double(1ull << 30), double(d.total_bytes) / double(1ull << 30)),
              d.free_bytes, d.total_bytes};
    }
  }
#else
  why = "this build has no CUDA backend (configure with -DTF_CUDA=ON)";
#endif
  if (want == "cuda") fail("--backend cuda: {}", why);
  return {"cpu", why, 0, 0};
}

double device_copy_bandwidth() {
#if TF_HAVE_CUDA
  return cuda::copy_bandwidth();
#else
  return 0;
#endif
}

}  // namespace tf
