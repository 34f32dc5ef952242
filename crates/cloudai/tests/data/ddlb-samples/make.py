# DDLB's own printing (ddlb/cli/benchmark.py and ddlb/benchmark.py at 0b92726), fed made-up timings
import sys, pandas as pd, numpy as np
pd.set_option('display.max_columns', None)
pd.set_option('display.width', None)
pd.set_option('display.max_rows', None)
pd.set_option('display.max_colwidth', None)
case = sys.argv[1]
ws = 8
if case == 'two-shapes':
    shapes = [(1024,128,1024),(8192,128,1024)]
    impls = {'pytorch': [{'backend':'nccl','order':'AG_before'}], 'fuser': [{'algorithm':'p2p_pipeline','backend':'cuda','order':'AG_before'}]}
    fail = None
elif case == 'invalid':
    shapes = [(4096,128,1024)]
    impls = {'pytorch': [{'backend':'nccl','order':'AG_before'}, {'backend':'nccl','order':'AG_after'}]}
    fail = 'pytorch_1'
primitive='tp_columnwise'
print(f"Running {primitive} benchmark with {ws} MPI processes")
print(f"Number of shapes: {len(shapes)}")
print("Shapes:")
for (mm,nn,kk) in shapes: print(f"  ({mm}, {nn}, {kk})")
print("\nConfigurations:")
ids=[]
for name, cfgs in impls.items():
    for i,o in enumerate(cfgs):
        print(f"  {name}_{i}: {o}"); ids.append((f"{name}_{i}", name, o))
frames=[]
rng=np.random.default_rng(7)
for (mm,nn,kk) in shapes:
    print(f"\n--- Running shape ({mm}, {nn}, {kk}) ---")
    rows=[]
    for impl_id, base, o in ids:
        print(f"Running benchmark for {impl_id} with options {{'implementation': '{base}', " + ", ".join(f"'{k}': '{v}'" for k,v in o.items()) + "}")
        times=list(0.05+0.001*mm/1024*rng.random(50))
        thr=[(2.0*mm*nn*kk)/1e9/t for t in times]
        label = base + " (" + ", ".join(f"{k}={v}" for k,v in o.items()) + ")"
        row={'implementation': label,'mean_time (ms)': float(np.mean(times)),'std_time': float(np.std(times)),'min_time': float(min(times)),'max_time': float(max(times)),'m':mm,'n':nn,'k':kk,'dtype':'float16','Throughput (TFLOPS)': float(np.mean(thr)),'Throughput std (TFLOPS)': float(np.std(thr)),'world_size':ws,'hostname':'node001','time_measurement_backend':'cpu_clock','barrier_at_each_iteration':True,'option': ", ".join(f"{k}={v}" for k,v in o.items())}
        if fail == impl_id:
            row['valid']=False
            print(f"Warning: Validation failed for {impl_id} with error: Tensor-likes are not close!")
        else:
            row['valid']=True
        print(pd.DataFrame([row]).to_string(index=False))
        rows.append(row)
    frames.append(pd.DataFrame(rows))
results=pd.concat(frames, ignore_index=True)
print("\nBenchmark Results:")
results['config']=results['implementation']
cols=['m','n','k','config','Throughput (TFLOPS)','Throughput std (TFLOPS)','mean_time (ms)','std_time','min_time','max_time']
print(results[cols])
