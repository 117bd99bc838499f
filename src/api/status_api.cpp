// Status names, last error and version queries.
#include "api/api_guard.hpp"
#include "core/raw_enum.hpp"
#include "ge_v2_api.h"

extern "C" {

const char* ge2_status_string(ge2_status_t status) {
  switch (ge2::raw_enum(status)) {
    case GE2_OK:
      return "GE2_OK";
    case GE2_ERROR_INVALID_ARGUMENT:
      return "GE2_ERROR_INVALID_ARGUMENT";
    case GE2_ERROR_SHAPE_MISMATCH:
      return "GE2_ERROR_SHAPE_MISMATCH";
    case GE2_ERROR_UNSUPPORTED:
      return "GE2_ERROR_UNSUPPORTED";
    case GE2_ERROR_NO_DEVICE:
      return "GE2_ERROR_NO_DEVICE";
    case GE2_ERROR_CUDA:
      return "GE2_ERROR_CUDA";
    case GE2_ERROR_CUBLAS:
      return "GE2_ERROR_CUBLAS";
    case GE2_ERROR_OUT_OF_MEMORY:
      return "GE2_ERROR_OUT_OF_MEMORY";
    case GE2_ERROR_TUNEDB:
      return "GE2_ERROR_TUNEDB";
    case GE2_ERROR_VERSION_MISMATCH:
      return "GE2_ERROR_VERSION_MISMATCH";
    case GE2_ERROR_INTERNAL:
      return "GE2_ERROR_INTERNAL";
  }
  return "GE2_UNKNOWN_STATUS";
}

const char* ge2_last_error(void) { return ge2::last_error(); }

int ge2_get_api_version(void) { return GE2_API_VERSION; }

const char* ge2_get_version_string(void) { return GE2_VERSION_STRING; }

}  // extern "C"
