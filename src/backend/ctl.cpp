#include "backend/ctl.h"

#if defined(TF_CTL) && TF_CTL
namespace tf {
int g_active_control = 0;
}
#endif
