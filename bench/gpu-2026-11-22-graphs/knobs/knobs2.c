/* Throwaway: a one-node graph whose node is updated before every launch, against cuLaunchKernel. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define N 3000
static double now_us(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int cmp(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return (x>y)-(x<y);}
#define MUST(x) do{CUresult r_=(x); if(r_){const char*s;cuGetErrorName(r_,&s);fprintf(stderr,"%s: %s\n",#x,s);exit(1);}}while(0)
struct P640 { int *slot; long long bytes; char pad[624]; };
static CUfunction f168, f168b, f640; static struct P640 prm; static CUgraphExec gexec; static CUgraphNode node;
enum { M_PLAIN, M_GRAPH_FIXED, M_SET_BEFORE, M_SET_AFTER, M_SET_ALT_FUNC, M_SET_ALT_GRID };
static void measure(const char *name, CUstream s, int mode, CUfunction f, unsigned psz){
  static double call[N], ev[N]; CUevent a,b;
  MUST(cuEventCreate(&a,0)); MUST(cuEventCreate(&b,0));
  void *args[]={&prm};
  CUDA_KERNEL_NODE_PARAMS kp; memset(&kp,0,sizeof kp);
  kp.func=f; kp.gridDimX=1; kp.gridDimY=1; kp.gridDimZ=1; kp.blockDimX=128; kp.blockDimY=1; kp.blockDimZ=1; kp.kernelParams=args;
  (void)psz;
  for(int i=-100;i<N;i++){
    prm.pad[0]=(char)i;   /* the parameters change every launch */
    double t0=now_us();
    switch(mode){
    case M_PLAIN: MUST(cuEventRecord(a,s)); t0=now_us(); MUST(cuLaunchKernel(f,1,1,1,128,1,1,0,s,args,NULL)); break;
    case M_GRAPH_FIXED: MUST(cuEventRecord(a,s)); t0=now_us(); MUST(cuGraphLaunch(gexec,s)); break;
    case M_SET_BEFORE: MUST(cuEventRecord(a,s)); t0=now_us(); MUST(cuGraphExecKernelNodeSetParams(gexec,node,&kp)); MUST(cuGraphLaunch(gexec,s)); break;
    case M_SET_AFTER: t0=now_us(); MUST(cuGraphExecKernelNodeSetParams(gexec,node,&kp)); MUST(cuEventRecord(a,s)); MUST(cuGraphLaunch(gexec,s)); break;
    case M_SET_ALT_FUNC: kp.func = (i&1)? f168b : f168; MUST(cuEventRecord(a,s)); t0=now_us(); MUST(cuGraphExecKernelNodeSetParams(gexec,node,&kp)); MUST(cuGraphLaunch(gexec,s)); break;
    case M_SET_ALT_GRID: kp.gridDimX = (i&1)? 32 : 1; kp.gridDimY = (i&1) ? 8 : 1; MUST(cuEventRecord(a,s)); t0=now_us(); MUST(cuGraphExecKernelNodeSetParams(gexec,node,&kp)); MUST(cuGraphLaunch(gexec,s)); break;
    }
    double t1=now_us(); MUST(cuEventRecord(b,s)); MUST(cuStreamSynchronize(s));
    float ms; MUST(cuEventElapsedTime(&ms,a,b)); if(i>=0){call[i]=t1-t0;ev[i]=ms*1e3;}
  }
  qsort(call,N,sizeof*call,cmp); qsort(ev,N,sizeof*ev,cmp);
  printf("%-46s call p10/p50/p90 %5.2f %5.2f %5.2f  events %5.2f %5.2f %5.2f us\n",name,call[N/10],call[N/2],call[N*9/10],ev[N/10],ev[N/2],ev[N*9/10]);
  fflush(stdout); cuEventDestroy(a); cuEventDestroy(b);
}
static void make_graph(CUstream s, CUfunction f){
  CUgraph g; void *args[]={&prm};
  MUST(cuStreamBeginCapture(s,CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  MUST(cuLaunchKernel(f,1,1,1,128,1,1,0,s,args,NULL));
  MUST(cuStreamEndCapture(s,&g));
  size_t n=1; MUST(cuGraphGetNodes(g,&node,&n));
  MUST(cuGraphInstantiate(&gexec,g,0));
  /* the exec's node handle is the graph's node */
}
int main(void){
  CUdevice dev; CUcontext ctx; CUmodule mod;
  MUST(cuInit(0)); MUST(cuDeviceGet(&dev,0)); cuDevicePrimaryCtxSetFlags(dev,CU_CTX_SCHED_SPIN);
  MUST(cuDevicePrimaryCtxRetain(&ctx,dev)); MUST(cuCtxSetCurrent(ctx));
  MUST(cuModuleLoad(&mod,"build-ab/knobs/tiny2_sm90.cubin"));
  MUST(cuModuleGetFunction(&f168,mod,"tiny168")); MUST(cuModuleGetFunction(&f168b,mod,"tiny168b")); MUST(cuModuleGetFunction(&f640,mod,"tiny640"));
  CUdeviceptr slot; MUST(cuMemAlloc(&slot,4096)); prm.slot=(int*)(uintptr_t)slot; prm.bytes=0;
  CUstream s; MUST(cuStreamCreate(&s,CU_STREAM_NON_BLOCKING));
  for(int round=0;round<2;round++){
    make_graph(s,f168);
    measure("168 B: cuLaunchKernel",s,M_PLAIN,f168,168);
    measure("168 B: graph, fixed params",s,M_GRAPH_FIXED,f168,168);
    measure("168 B: set params + graph launch",s,M_SET_BEFORE,f168,168);
    measure("168 B: (set params outside events)",s,M_SET_AFTER,f168,168);
    measure("168 B: set, function alternating",s,M_SET_ALT_FUNC,f168,168);
    measure("168 B: set, grid 1x1 / 32x8 alternating",s,M_SET_ALT_GRID,f168,168);
    cuGraphExecDestroy(gexec);
    make_graph(s,f640);
    measure("640 B: cuLaunchKernel",s,M_PLAIN,f640,640);
    measure("640 B: set params + graph launch",s,M_SET_BEFORE,f640,640);
    cuGraphExecDestroy(gexec);
  }
  return 0;
}
