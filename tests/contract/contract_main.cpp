// Runs every registered CPU kernel's contract check; in the controls build also proves each planted control is caught.
#include <cstdio>

#include "backend/ctl.h"
#include "backend/kernel_registry.h"
#include "harness.h"

int main() {
  using namespace tf;
  int kernels = 0, pass = 0, controls = 0, caught = 0;
  for (const KernelRecord& rec : kernel_records("cpu")) {
    ++kernels;
    auto it = contract::checks().find(rec.name);
    std::string why = it == contract::checks().end() ? "no contract check registered" : it->second();
    std::printf("%-16s %s%s\n", rec.name.c_str(), why.empty() ? "pass" : "FAIL: ", why.c_str());
    if (why.empty()) ++pass;
#if defined(TF_CTL) && TF_CTL
    for (const PlantedControl& c : rec.controls) {
      ++controls;
      g_active_control = c.id;
      std::string red = it == contract::checks().end() ? "" : it->second();
      g_active_control = 0;
      std::printf("  control %2d (%s): %s%s\n", c.id, c.what.c_str(), red.empty() ? "NOT CAUGHT" : "caught: ",
                  red.c_str());
      if (!red.empty()) ++caught;
    }
#endif
  }
#if defined(TF_CTL) && TF_CTL
  std::printf("SUMMARY contract cpu: kernels=%d pass=%d fail=%d controls=%d caught=%d\n", kernels, pass,
              kernels - pass, controls, caught);
#else
  std::printf("SUMMARY contract cpu (production build): kernels=%d pass=%d fail=%d\n", kernels, pass, kernels - pass);
#endif
  return (pass == kernels && caught == controls) ? 0 : 1;
}
