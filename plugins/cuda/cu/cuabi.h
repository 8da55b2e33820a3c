// cuabi.h: the CUDA driver API's types as gorun uses them, reduced to
// what they are on every 64-bit platform, so that neither gorun's CUDA
// plugin (cu_cgo.go) nor the fake driver (../fakecuda) needs CUDA's
// headers.
#ifndef GORUN_CUABI_H
#define GORUN_CUABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef struct { char reserved[64]; } CUipcMemHandle;

#endif
