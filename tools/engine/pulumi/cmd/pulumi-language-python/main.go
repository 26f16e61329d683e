// Command pulumi-language-python is kimi-k3's Python language host for the engine lane (make test-engine).
//
// Why our own: upstream's host (module github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3) is not
// served by the Go module proxy this project can reach (every version answers 403), so it cannot be built from
// modules. This main keeps upstream's protocol and process layout for what the lane uses, built on sdk/v3's own
// packages (toolchain, PolicyProxy, rpcutil): Run starts `python pulumi-language-python-exec --monitor ...` with
// PULUMI_CONFIG / PULUMI_CONFIG_SECRET_KEYS, and RunPlugin starts policy packs as `python -u -m pulumi.policy
// <engine> <pack dir>` behind the PolicyProxy (how Pulumi >= 3.221 runs Python packs). Not implemented: package
// discovery (GetRequiredPackages answers none, so providers are loaded on first use), dependency installation
// (the venv is made by `make venv`), debugging, typecheckers, codegen.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/logging"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Exit code of pulumi-language-python-exec after it printed an actionable error itself (upstream's constant).
const exitAfterUserActionableMessage = 32

func main() {
	showVersion := flag.Bool("version", false, "print the plugin version and exit")
	flag.String("tracing", "", "ignored (accepted for compatibility with the engine's arguments)")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version)
		return
	}
	logging.InitLogging(false, 0, false)

	self, err := os.Executable()
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not determine current executable: %w", err))
	}
	execScript := filepath.Join(filepath.Dir(self), "pulumi-language-python-exec")
	if _, err := os.Stat(execScript); err != nil {
		cmdutil.Exit(fmt.Errorf("missing executor %s next to the language host: %w", execScript, err))
	}

	var engineAddress string
	if args := flag.Args(); len(args) > 0 {
		engineAddress = args[0]
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	cancelChannel := make(chan bool)
	go func() {
		<-ctx.Done()
		cancel()
		close(cancelChannel)
	}()
	if engineAddress != "" {
		if err := rpcutil.Healthcheck(ctx, engineAddress, 5*time.Minute, cancel); err != nil {
			cmdutil.Exit(fmt.Errorf("could not start health check: %w", err))
		}
	}

	hostCtx, hostCancel := context.WithCancel(context.Background())
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancelChannel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, &pythonHost{
				exec: execScript, engineAddress: engineAddress, cancelCtx: hostCtx, cancelFunc: hostCancel,
			})
			return nil
		},
	})
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not start language host RPC server: %w", err))
	}
	fmt.Printf("%d\n", handle.Port) // the engine reads the port from our first line of output
	if err := <-handle.Done; err != nil {
		cmdutil.Exit(fmt.Errorf("language host RPC stopped serving: %w", err))
	}
}

type pythonHost struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	exec          string
	engineAddress string
	cancelCtx     context.Context
	cancelFunc    context.CancelFunc
}

// pythonOptions reads Pulumi.yaml's runtime options (virtualenv, toolchain) like upstream's parseOptions.
func pythonOptions(info *pulumirpc.ProgramInfo, isPlugin bool) (toolchain.PythonOptions, error) {
	opts := toolchain.PythonOptions{Root: info.RootDirectory, ProgramDir: info.ProgramDirectory}
	options := info.Options.AsMap()
	if v, ok := options["virtualenv"]; ok {
		s, ok := v.(string)
		if !ok {
			return opts, errors.New("virtualenv option must be a string")
		}
		opts.Virtualenv = s
	}
	if v, ok := options["toolchain"]; ok {
		switch v {
		case "pip":
			opts.Toolchain = toolchain.Pip
		case "uv":
			opts.Toolchain = toolchain.Uv
		case "poetry":
			opts.Toolchain = toolchain.Poetry
		default:
			return opts, fmt.Errorf("unsupported toolchain option: %v (allowed: pip, uv, poetry)", v)
		}
	}
	if isPlugin && opts.Virtualenv == "" && (opts.Toolchain == toolchain.Pip || opts.Toolchain == toolchain.Auto) {
		opts.Virtualenv = "venv"
	}
	return opts, nil
}

func (h *pythonHost) Handshake(
	ctx context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	h.engineAddress = req.EngineAddress
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *pythonHost) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

func (h *pythonHost) GetRequiredPlugins(
	context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (h *pythonHost) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

func (h *pythonHost) GetProgramDependencies(
	context.Context, *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	return &pulumirpc.GetProgramDependenciesResponse{}, nil
}

func (h *pythonHost) About(context.Context, *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	return &pulumirpc.AboutResponse{Executable: "python", Metadata: map[string]string{"host": "kimi-k3 engine lane"}}, nil
}

// InstallDependencies does nothing: the lane's venv is made and pinned by `make venv`.
func (h *pythonHost) InstallDependencies(
	req *pulumirpc.InstallDependenciesRequest, server pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	return nil
}

func (h *pythonHost) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	h.cancelFunc()
	return &emptypb.Empty{}, nil
}

func (h *pythonHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	opts, err := pythonOptions(req.Info, false)
	if err != nil {
		return nil, err
	}
	tc, err := toolchain.ResolveToolchain(opts)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}

	args := []string{h.exec}
	add := func(k, v string) {
		if v != "" {
			args = append(args, "--"+k, v)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.engineAddress)
	add("project", req.GetProject())
	add("root_directory", req.GetInfo().RootDirectory)
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", strconv.FormatBool(req.GetDryRun()))
	add("parallel", strconv.Itoa(int(req.GetParallel())))
	add("organization", req.GetOrganization())
	args = append(args, req.Info.EntryPoint)
	args = append(args, req.GetArgs()...)

	config, err := json.Marshal(req.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("failed to serialize configuration: %w", err)
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secretKeysJSON, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, fmt.Errorf("failed to serialize configuration secret keys: %w", err)
	}

	runCtx, runCancel := context.WithCancel(h.cancelCtx)
	defer runCancel()
	context.AfterFunc(ctx, runCancel)
	cmd, err := tc.Command(runCtx, args...)
	if err != nil {
		return nil, err
	}
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	if req.GetConfig() != nil {
		env = append(env, "PULUMI_CONFIG="+string(config))
	}
	cmd.Env = append(env, "PULUMI_CONFIG_SECRET_KEYS="+string(secretKeysJSON))

	if err := cmd.Run(); err != nil {
		_ = os.Stdout.Sync()
		_ = os.Stderr.Sync()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.ExitStatus() == exitAfterUserActionableMessage {
				return &pulumirpc.RunResponse{Bail: true}, nil
			}
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("program exited with non-zero exit code: %d",
				exitErr.ExitCode())}, nil
		}
		return &pulumirpc.RunResponse{Error: fmt.Sprintf(
			"problem executing program (could not run language executor): %v", err)}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// RunPlugin runs policy packs (kind analyzer) as `python -u -m pulumi.policy <args> <pack dir>` in the pack's
// directory, with the stack's configuration in the environment, behind sdk/v3's PolicyProxy (as upstream does).
func (h *pythonHost) RunPlugin(
	req *pulumirpc.RunPluginRequest, server pulumirpc.LanguageRuntime_RunPluginServer,
) error {
	ctx := server.Context()
	isAnalyzer := req.Kind == string(apitype.AnalyzerPlugin)
	opts, err := pythonOptions(req.Info, !isAnalyzer)
	if err != nil {
		return err
	}
	tc, err := toolchain.ResolveToolchain(opts)
	if err != nil {
		return err
	}
	var args []string
	if isAnalyzer {
		args = append([]string{"-u", "-m", "pulumi.policy"}, req.Args...)
		args = append(args, req.Info.ProgramDirectory)
	} else {
		args = append([]string{req.Info.ProgramDirectory}, req.Args...)
	}
	cmd, err := tc.Command(ctx, args...)
	if err != nil {
		return err
	}
	closer, stdout, stderr, err := rpcutil.MakeRunPluginStreams(server, false)
	if err != nil {
		return err
	}
	defer closer.Close()

	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	var proxy *sdk.PolicyProxy
	if isAnalyzer {
		cmd.Dir = req.Info.ProgramDirectory
		proxy, stdout, err = sdk.NewPolicyProxy(ctx, stdout)
		if err != nil {
			return fmt.Errorf("could not start policy pack proxy: %w", err)
		}
		config, err := proxy.AwaitConfiguration(ctx)
		if err != nil {
			return fmt.Errorf("could not get stack configuration: %w", err)
		}
		if config != nil {
			set := func(k, v string) {
				if v != "" {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
			}
			set("PULUMI_ORGANIZATION", config.Organization)
			set("PULUMI_PROJECT", config.Project)
			set("PULUMI_STACK", config.Stack)
			set("PULUMI_DRY_RUN", strconv.FormatBool(config.DryRun))
			if config.Config != nil {
				configJSON, err := json.Marshal(config.Config)
				if err != nil {
					return fmt.Errorf("could not marshal stack configuration: %w", err)
				}
				set("PULUMI_CONFIG", string(configJSON))
			}
		}
	} else {
		cmd.Dir = req.Pwd
	}
	cmd.Env = append(cmd.Env, req.Env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr

	if err := cmd.Start(); err != nil {
		return fmt.Errorf("could not start plugin program: %w", err)
	}
	if proxy != nil {
		if err := proxy.Attach(ctx, cmd); err != nil { // waits for the pack to exit
			return fmt.Errorf("policy pack: %w", err)
		}
		return closer.Close()
	}
	if err := cmd.Wait(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return server.Send(&pulumirpc.RunPluginResponse{
				Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(exitErr.ExitCode())},
			})
		}
		return fmt.Errorf("plugin program failed: %w", err)
	}
	return closer.Close()
}
