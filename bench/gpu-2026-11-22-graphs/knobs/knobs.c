/* Throwaway: which host-side knob makes a launch cheaper (call time, events interval). */
#define _GNU_SOURCE
#include <cuda.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define N 3000
static double now_us(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int cmp(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return (x>y)-(x<y);}
#define MUST(x) do{CUresult r_=(x); if(r_){const char*s;cuGetErrorName(r_,&s);fprintf(stderr,"%s: %s\n",#x,s);exit(1);}}while(0)
struct P { int *slot; long long bytes; int pad[6]; };
static CUfunction f; static struct P prm; static CUgraphExec gexec;
enum { M_PLAIN, M_EX, M_EXTRA, M_GRAPH };
static void measure(const char *name, CUstream s, int mode){
  static double call[N], ev[N]; CUevent a,b;
  MUST(cuEventCreate(&a,0)); MUST(cuEventCreate(&b,0));
  void *args[]={&prm}; size_t sz=sizeof prm;
  void *extra[]={CU_LAUNCH_PARAM_BUFFER_POINTER,&prm,CU_LAUNCH_PARAM_BUFFER_SIZE,&sz,CU_LAUNCH_PARAM_END};
  CUlaunchConfig cfg; memset(&cfg,0,sizeof cfg); cfg.gridDimX=1;cfg.gridDimY=1;cfg.gridDimZ=1;cfg.blockDimX=128;cfg.blockDimY=1;cfg.blockDimZ=1;cfg.hStream=s;
  for(int i=-100;i<N;i++){
    MUST(cuEventRecord(a,s)); double t0=now_us();
    switch(mode){
    case M_PLAIN: MUST(cuLaunchKernel(f,1,1,1,128,1,1,0,s,args,NULL)); break;
    case M_EX: MUST(cuLaunchKernelEx(&cfg,f,args,NULL)); break;
    case M_EXTRA: MUST(cuLaunchKernel(f,1,1,1,128,1,1,0,s,NULL,extra)); break;
    case M_GRAPH: MUST(cuGraphLaunch(gexec,s)); break;
    }
    double t1=now_us(); MUST(cuEventRecord(b,s)); MUST(cuStreamSynchronize(s));
    float ms; MUST(cuEventElapsedTime(&ms,a,b)); if(i>=0){call[i]=t1-t0;ev[i]=ms*1e3;}
  }
  qsort(call,N,sizeof*call,cmp); qsort(ev,N,sizeof*ev,cmp);
  printf("%-40s call p10/p50/p90 %5.2f %5.2f %5.2f  events %5.2f %5.2f %5.2f us\n",name,call[N/10],call[N/2],call[N*9/10],ev[N/10],ev[N/2],ev[N*9/10]);
  fflush(stdout); cuEventDestroy(a); cuEventDestroy(b);
}
int main(int argc,char**argv){
  unsigned flags = argc>1 ? (unsigned)atoi(argv[1]) : CU_CTX_SCHED_SPIN;
  int cpu = argc>2 ? atoi(argv[2]) : -1;
  if(cpu>=0){cpu_set_t cs;CPU_ZERO(&cs);CPU_SET(cpu,&cs);if(sched_setaffinity(0,sizeof cs,&cs))perror("affinity");}
  CUdevice dev; CUcontext ctx; CUmodule mod;
  MUST(cuInit(0)); MUST(cuDeviceGet(&dev,0)); cuDevicePrimaryCtxSetFlags(dev,flags);
  MUST(cuDevicePrimaryCtxRetain(&ctx,dev)); MUST(cuCtxSetCurrent(ctx));
  MUST(cuModuleLoad(&mod,"build-ab/knobs/tiny_sm90.cubin")); MUST(cuModuleGetFunction(&f,mod,"tiny"));
  CUdeviceptr slot; MUST(cuMemAlloc(&slot,4096)); prm.slot=(int*)(uintptr_t)slot; prm.bytes=0;
  CUstream s, sp; MUST(cuStreamCreate(&s,CU_STREAM_NON_BLOCKING));
  int lo,hi; MUST(cuCtxGetStreamPriorityRange(&lo,&hi)); MUST(cuStreamCreateWithPriority(&sp,CU_STREAM_NON_BLOCKING,hi));
  /* graph with the one kernel node */
  CUgraph g; MUST(cuStreamBeginCapture(s,CU_STREAM_CAPTURE_MODE_RELAXED));
  void *args[]={&prm}; MUST(cuLaunchKernel(f,1,1,1,128,1,1,0,s,args,NULL));
  MUST(cuStreamEndCapture(s,&g)); MUST(cuGraphInstantiate(&gexec,g,0));
  printf("ctx flags %u, cpu %d\n",flags,cpu);
  for(int round=0;round<2;round++){
    measure("plain, non-blocking stream",s,M_PLAIN);
    measure("cuLaunchKernelEx",s,M_EX);
    measure("params in extra buffer",s,M_EXTRA);
    measure("high-priority stream",sp,M_PLAIN);
    measure("per-thread default stream",CU_STREAM_PER_THREAD,M_PLAIN);
    measure("legacy NULL stream",0,M_PLAIN);
    measure("graph launch (one node)",s,M_GRAPH);
  }
  return 0;
}
