/* The public header must compile as strict C89 (checked by the header_c89 test). */
#include "ge_v2_api.h"

int main(void) {
  ge2_tensor_desc_t desc;
  desc.dtype = GE2_DTYPE_F16;
  desc.rank = 2;
  return ge2_get_api_version() == GE2_API_VERSION && desc.rank == 2 ? 0 : 1;
}
